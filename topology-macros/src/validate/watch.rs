//! The rule of `#[kv_watch]` checked at expansion: the keys' syntax. (That `bucket` names a
//! `#[kv_bucket]` type is checked by the compiler, at its token.)

use topology_core::watch::check_keys;

use crate::attrs::WatchAttrs;
use crate::ctxt::Ctxt;
use crate::value::key_msg;

pub(crate) fn watch(attrs: &WatchAttrs, cx: &mut Ctxt) {
    if let Some(keys) = &attrs.keys
        && let Err(e) = check_keys(&keys.value())
    {
        cx.error_spanned_by(
            keys,
            key_msg(
                "kv_watch",
                "keys",
                format!(
                    "{:?} is not a key or key pattern: {}",
                    keys.value(),
                    e.message()
                ),
            ),
        );
    }
}
