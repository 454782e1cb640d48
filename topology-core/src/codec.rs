//! How a payload is written on the wire: the codec a consumer, an endpoint or a subscription
//! declares (`codec = "msgpack"`), and the `Content-Type` each one writes and accepts.
//!
//! The runtime's `codec` module does the encoding; this is what the declarations, the export
//! and the checks share.

/// The header that names a payload's codec, written on publish and read on receive.
pub const CONTENT_TYPE_HEADER: &str = "Content-Type";

/// Which payload codec a declaration uses (the runtime's `codec` module has the codecs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CodecId {
    /// JSON (`serde_json`): the default.
    #[default]
    Json,
    /// MessagePack (`rmp-serde`, structs written as maps of field names).
    MsgPack,
    /// CBOR (`ciborium`).
    Cbor,
    /// Protocol Buffers (`prost`): payload types that implement `prost::Message`.
    Protobuf,
    /// The bytes as they are (`Bytes`, `Vec<u8>`): nothing decoded.
    Raw,
}

impl CodecId {
    /// Every codec, in the order messages list them.
    pub const ALL: [CodecId; 5] = [
        CodecId::Json,
        CodecId::MsgPack,
        CodecId::Cbor,
        CodecId::Protobuf,
        CodecId::Raw,
    ];

    /// The name written in an attribute (`codec = "msgpack"`), which is also the name of the
    /// cargo feature that brings it (JSON and raw bytes need none).
    pub const fn name(self) -> &'static str {
        match self {
            CodecId::Json => "json",
            CodecId::MsgPack => "msgpack",
            CodecId::Cbor => "cbor",
            CodecId::Protobuf => "protobuf",
            CodecId::Raw => "raw",
        }
    }

    /// The `Content-Type` it writes.
    pub const fn content_type(self) -> &'static str {
        match self {
            CodecId::Json => "application/json",
            CodecId::MsgPack => "application/msgpack",
            CodecId::Cbor => "application/cbor",
            CodecId::Protobuf => "application/protobuf",
            CodecId::Raw => "application/octet-stream",
        }
    }

    /// Whether a message whose `Content-Type` is `received` is this codec's: its own content
    /// type or a common alias (`application/x-msgpack`, `application/x-protobuf`, ...), any
    /// case, parameters after `;` ignored. Raw bytes accept anything.
    pub fn accepts(self, received: &str) -> bool {
        let essence = match received.split_once(';') {
            Some((essence, _)) => essence,
            None => received,
        }
        .trim();
        let aliases: &[&str] = match self {
            CodecId::Json => &["application/json", "text/json"],
            CodecId::MsgPack => &[
                "application/msgpack",
                "application/x-msgpack",
                "application/vnd.msgpack",
            ],
            CodecId::Cbor => &["application/cbor"],
            CodecId::Protobuf => &[
                "application/protobuf",
                "application/x-protobuf",
                "application/vnd.google.protobuf",
            ],
            CodecId::Raw => return true,
        };
        aliases.iter().any(|a| a.eq_ignore_ascii_case(essence))
            || (self == CodecId::Json && ends_with_ignore_case(essence, "+json"))
    }

    /// The codec whose `Content-Type` `received` is, if any.
    pub fn of_content_type(received: &str) -> Option<CodecId> {
        CodecId::ALL
            .into_iter()
            .filter(|c| *c != CodecId::Raw)
            .find(|c| c.accepts(received))
    }
}

fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.is_char_boundary(s.len() - suffix.len())
        && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

#[cfg(test)]
mod tests {
    use super::CodecId;

    #[test]
    fn each_codec_accepts_its_own_content_type_and_aliases_only() {
        for codec in CodecId::ALL {
            assert!(codec.accepts(codec.content_type()), "{codec:?}");
        }
        assert!(CodecId::MsgPack.accepts("application/x-msgpack"));
        assert!(CodecId::Protobuf.accepts("Application/X-Protobuf; proto=shop.Order"));
        assert!(CodecId::Json.accepts("application/cloudevents+json"));
        assert!(CodecId::Json.accepts("application/json; charset=utf-8"));
        assert!(!CodecId::Json.accepts("application/msgpack"));
        assert!(!CodecId::Cbor.accepts("application/json"));
        assert!(CodecId::Raw.accepts("anything/at-all"));
        assert_eq!(
            CodecId::of_content_type("application/vnd.msgpack"),
            Some(CodecId::MsgPack)
        );
        assert_eq!(CodecId::of_content_type("text/plain"), None);
    }
}
