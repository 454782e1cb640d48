//! The rules of `#[kv_bucket]` and `#[object_store]`: the name, no settings on an external
//! bucket, the description's length (ranges and durations are checked as their keys are read).

use topology_core::bucket::{self, BucketError, EXTERNAL_REFUSED_KEYS};

use crate::attrs::BucketAttrs;
use crate::ctxt::Ctxt;
use crate::value::key_msg;

pub(crate) fn bucket(attrs: &BucketAttrs, cx: &mut Ctxt) {
    let attr = attr_of(attrs);
    if let Some(name) = &attrs.name
        && !bucket::valid_bucket_name(&name.value())
    {
        cx.error_spanned_by(
            name,
            key_msg(
                attr,
                "name",
                format!(
                    "{:?} is not a valid bucket name: {}",
                    name.value(),
                    BucketError::Name.message()
                ),
            ),
        );
    }
    if attrs.external {
        for (key, token) in &attrs.given {
            if EXTERNAL_REFUSED_KEYS.contains(key) {
                cx.error_spanned_by(
                    token,
                    format!(
                        "`#[{attr}]` key `{key}` cannot be set on an `external` bucket: it is owned elsewhere, never created or changed here (only its `name` is declared, for checks); remove `{key}`"
                    ),
                );
            }
        }
    }
    if let (Some(codec), None) = (&attrs.codec, &attrs.value) {
        let name = codec.id.name();
        cx.error_at(
            codec.span,
            format!(
                "`#[{attr}]` key `codec`: without `value` the bucket's values are raw bytes, passed through as they are, so `codec = \"{name}\"` has nothing to write; declare the values' type (`value = Status`), or remove `codec`"
            ),
        );
    }
    if let Some(description) = &attrs.description {
        super::description(attr, description, cx);
    }
}

/// The attribute's name.
pub(crate) fn attr_of(attrs: &BucketAttrs) -> &'static str {
    match attrs.kind {
        bucket::BucketKind::KeyValue => "kv_bucket",
        bucket::BucketKind::Object => "object_store",
    }
}
