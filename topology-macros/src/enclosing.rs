//! Whether a handler sits inside an `impl` block, which the attribute cannot see: it is given
//! the function alone. Read from the handler's source file, at the position of its name.
//!
//! Conservative by construction: any doubt (no file, no position, a position that does not hold
//! the name, a file that does not scan) answers "no", and the handler is compiled as usual
//! (rustc then reports the `impl` case in its own words). Only a name found in the file whose
//! innermost enclosing `{` opens an `impl` answers "yes".

use proc_macro2::Span;
use syn::Ident;

/// Whether `ident` (a handler's name, as the macro received it) is directly inside an `impl`
/// block of its source file.
pub(crate) fn inside_impl(ident: &Ident) -> bool {
    // Outside a compiler invocation (unit tests, the fuzz test) spans have no file.
    if !proc_macro::is_available() {
        return false;
    }
    let span: Span = ident.span();
    let Some(path) = span.local_file() else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let start = span.start();
    let Some(offset) = offset_of(&text, start.line, start.column) else {
        return false;
    };
    let name = ident.to_string();
    let name = name.strip_prefix("r#").unwrap_or(&name);
    if !text[offset..].starts_with(name) && !text[offset..].starts_with(&format!("r#{name}")) {
        return false;
    }
    innermost_brace_is_impl(&text[..offset]).unwrap_or(false)
}

/// The byte offset of `line` (1-based) and `column` (0-based, in characters).
fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    let line_start = if line <= 1 {
        0
    } else {
        text.match_indices('\n').nth(line - 2)?.0 + 1
    };
    let rest = &text[line_start..];
    let in_line = match rest.char_indices().nth(column) {
        Some((i, _)) => i,
        None => return None,
    };
    Some(line_start + in_line)
}

/// Scans `source` (a file up to a position) and tells whether the innermost `{` still open at
/// its end opens an `impl` block; `None` when there is no open brace or the text does not scan
/// (an unterminated comment, string or character).
fn innermost_brace_is_impl(source: &str) -> Option<bool> {
    let chars: Vec<char> = source.chars().collect();
    // For each open brace: whether it opens an `impl`.
    let mut open: Vec<bool> = Vec::new();
    // The words of the current item's header, since the last `;`, `{` or `}`; attributes
    // (`#[..]`) are left out.
    let mut header: Vec<String> = Vec::new();
    let mut attr_depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '/' if next == Some('*') => {
                let mut depth = 0usize;
                loop {
                    match (chars.get(i), chars.get(i + 1)) {
                        (Some('/'), Some('*')) => {
                            depth += 1;
                            i += 2;
                        }
                        (Some('*'), Some('/')) => {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        (Some(_), _) => i += 1,
                        (None, _) => return None,
                    }
                }
                continue;
            }
            '"' => {
                i = skip_string(&chars, i + 1)?;
                continue;
            }
            '\'' => {
                i = skip_quote(&chars, i)?;
                continue;
            }
            '#' if attr_depth == 0 && matches!(next, Some('[') | Some('!')) => {
                // `#[` or `#![`: the attribute's brackets follow.
                let mut j = i + 1;
                if chars.get(j) == Some(&'!') {
                    j += 1;
                }
                if chars.get(j) == Some(&'[') {
                    attr_depth = 1;
                    i = j + 1;
                    continue;
                }
            }
            '[' if attr_depth > 0 => attr_depth += 1,
            ']' if attr_depth > 0 => attr_depth -= 1,
            _ if attr_depth > 0 => {}
            '{' => {
                open.push(is_impl_header(&header));
                header.clear();
            }
            '}' => {
                open.pop()?;
                header.clear();
            }
            ';' => header.clear(),
            c if c.is_alphabetic() || c == '_' => {
                let begin = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[begin..i].iter().collect();
                // A raw string or byte/C string literal: `r"..."`, `r#"..."#`, `b"..."`, `br"..."`.
                if matches!(word.as_str(), "r" | "br" | "cr")
                    && matches!(chars.get(i), Some('"') | Some('#'))
                {
                    let mut hashes = 0;
                    while chars.get(i + hashes) == Some(&'#') {
                        hashes += 1;
                    }
                    if chars.get(i + hashes) == Some(&'"') {
                        i = skip_raw_string(&chars, i + hashes + 1, hashes)?;
                        continue;
                    }
                    // `r#ident`: a raw identifier.
                    if word == "r" && hashes == 1 {
                        i += 1;
                        continue;
                    }
                }
                if matches!(word.as_str(), "b" | "c") && chars.get(i) == Some(&'"') {
                    i = skip_string(&chars, i + 1)?;
                    continue;
                }
                if word == "b" && chars.get(i) == Some(&'\'') {
                    i = skip_quote(&chars, i)?;
                    continue;
                }
                header.push(word);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    open.last().copied()
}

/// Whether an item header (its words, attributes left out) starts an `impl` block:
/// `impl ..`, `unsafe impl ..`, `default impl ..`.
fn is_impl_header(header: &[String]) -> bool {
    header
        .iter()
        .find(|w| !matches!(w.as_str(), "unsafe" | "default"))
        .is_some_and(|w| w == "impl")
}

/// Past the end of a string whose opening `"` precedes `i`.
fn skip_string(chars: &[char], mut i: usize) -> Option<usize> {
    loop {
        match chars.get(i)? {
            '\\' => i += 2,
            '"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// Past the end of a raw string with `hashes` hashes whose opening `"` precedes `i`.
fn skip_raw_string(chars: &[char], mut i: usize, hashes: usize) -> Option<usize> {
    loop {
        if *chars.get(i)? == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
}

/// Past a character literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`) at `i`.
fn skip_quote(chars: &[char], i: usize) -> Option<usize> {
    match chars.get(i + 1)? {
        '\\' => {
            // Past the backslash and the escaped character (`'\''` holds a quote).
            let mut j = i + 3;
            while *chars.get(j)? != '\'' {
                j += 1;
            }
            Some(j + 1)
        }
        _ if chars.get(i + 2) == Some(&'\'') => Some(i + 3),
        // A lifetime or a label: the quote alone.
        _ => Some(i + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_marker(source: &str) -> Option<bool> {
        let end = source.find("HERE").expect("a HERE marker");
        innermost_brace_is_impl(&source[..end])
    }

    #[test]
    fn free_functions() {
        assert_eq!(
            at_marker("use a::b;\n#[queue_consumer(x = [1])]\nasync fn HERE"),
            None
        );
        assert_eq!(at_marker("mod m {\n  async fn HERE"), Some(false));
        assert_eq!(
            at_marker("impl X { fn a() {} }\nmod m { fn b() -> impl Fn() { || {} } }\nfn HERE"),
            None
        );
        assert_eq!(
            at_marker("trait T { fn a(); }\nmod m {\n fn HERE"),
            Some(false)
        );
    }

    #[test]
    fn inside_impls() {
        assert_eq!(at_marker("impl Billing {\n    async fn HERE"), Some(true));
        assert_eq!(
            at_marker(
                "#[cfg(x)]\nunsafe impl<T: Fn() -> u8> X for Y<T> where T: Send {\n fn a() { let c = '{'; }\n #[q(a = \"}\")]\n async fn HERE"
            ),
            Some(true)
        );
        assert_eq!(
            at_marker(
                "impl X {\n // }\n /* } /* } */ */\n fn a<'a>(s: &'a str) { r#\"}\"#; b'}'; }\n fn HERE"
            ),
            Some(true)
        );
        assert_eq!(at_marker("mod m { impl X { fn HERE"), Some(true));
    }

    #[test]
    fn escaped_quotes() {
        assert_eq!(
            at_marker("impl X { fn a() { '\\''; '{'; } fn HERE"),
            Some(true)
        );
        assert_eq!(at_marker("fn a() { let q = '\\''; }\nfn HERE"), None);
    }

    #[test]
    fn doubt_is_no() {
        assert_eq!(at_marker("impl X { /* unterminated\n fn HERE"), None);
        assert_eq!(at_marker("} fn HERE"), None);
    }

    #[test]
    fn offsets() {
        assert_eq!(offset_of("ab\ncd\néf", 3, 1), Some(8));
        assert_eq!(offset_of("ab", 1, 0), Some(0));
        assert_eq!(offset_of("ab", 2, 0), None);
    }
}
