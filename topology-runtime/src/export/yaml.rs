//! A JSON value as YAML (block style; every string double-quoted, with JSON's escapes, which
//! YAML's double-quoted strings share), so the YAML document is the JSON one, readably.

use serde_json::Value;

/// `value` as a YAML document.
pub(crate) fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => object(map, 0, &mut out),
        Value::Array(items) if !items.is_empty() => array(items, 0, &mut out),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

/// Empty collections and scalars, on one line.
fn inline(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        // Null, booleans, numbers and double-quoted strings are the same in both.
        scalar => scalar.to_string(),
    }
}

fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => false,
    }
}

fn object(map: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (key, value) in map {
        push_indent(indent, out);
        out.push_str(&key_text(key));
        out.push(':');
        value_after_key(value, indent, out);
    }
}

fn value_after_key(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            object(map, indent + 2, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            array(items, indent + 2, out);
        }
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

fn array(items: &[Value], indent: usize, out: &mut String) {
    for item in items {
        push_indent(indent, out);
        out.push_str("- ");
        if is_block(item) {
            // The item's block at `indent + 2`, its first line after the dash.
            let mut block = String::new();
            match item {
                Value::Object(map) => object(map, indent + 2, &mut block),
                Value::Array(inner) => array(inner, indent + 2, &mut block),
                _ => unreachable!("is_block"),
            }
            out.push_str(&block[indent + 2..]);
        } else {
            out.push_str(&inline(item));
            out.push('\n');
        }
    }
}

/// A key as a plain scalar when that reads back as the same string, else double-quoted.
fn key_text(key: &str) -> String {
    let plain = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '$' || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.$/-".contains(c))
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
        );
    if plain {
        key.to_owned()
    } else {
        Value::String(key.to_owned()).to_string()
    }
}

fn push_indent(indent: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', indent));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_yaml_shapes() {
        let value = serde_json::json!({
            "a": 1,
            "b": {"c": "x: \"y\"", "d": []},
            "e": [1, {"f": true, "g": [null]}, [2, 3], {}],
            "h": {},
            "orders.>": "yes",
            "on": 1,
        });
        let expected = "a: 1\nb:\n  c: \"x: \\\"y\\\"\"\n  d: []\ne:\n  - 1\n  - f: true\n    g:\n      - null\n  - - 2\n    - 3\n  - {}\nh: {}\n\"on\": 1\n\"orders.>\": \"yes\"\n";
        assert_eq!(to_yaml(&value), expected);
    }
}
