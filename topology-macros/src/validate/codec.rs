//! The rule of `codec = ".."`, which needs the handler: a codec decodes a typed payload, so a
//! handler that takes the raw bytes (`Bytes`, `Vec<u8>`) has nothing for it to do. (Whether the
//! codec can read the payload type, and whether its cargo feature is on, is the type checker's
//! to say: the glue names the codec's type, whose `Decode<T>` bound carries the message.)

use crate::attrs::CodecAttr;
use crate::ctxt::Ctxt;
use crate::item::{self, Handler};

/// Refuses a codec on a handler whose payload, and for an endpoint whose reply too, is raw.
pub(crate) fn codec(
    attr: &str,
    codec: Option<&CodecAttr>,
    handler: Option<&Handler>,
    cx: &mut Ctxt,
) {
    let (Some(codec), Some(handler)) = (codec, handler) else {
        return;
    };
    if !handler.raw {
        return;
    }
    let reply_raw = match &handler.output {
        Some(output) if attr == "endpoint" => item::result_ok_type(output).is_none_or(item::is_raw),
        _ => true,
    };
    if reply_raw {
        let name = codec.id.name();
        let what = if attr == "endpoint" {
            "the request and the reply are raw bytes"
        } else {
            "the payload is raw bytes"
        };
        cx.error_at(
            codec.span,
            format!(
                "`#[{attr}]` key `codec`: {what} (`Bytes` or `Vec<u8>`), passed through as they are, so `codec = \"{name}\"` has nothing to decode; take a typed payload (`serde` types for JSON, MessagePack and CBOR, `prost::Message` types for protobuf), or remove `codec`"
            ),
        );
    }
}
