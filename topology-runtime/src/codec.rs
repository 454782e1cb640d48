//! Payload codecs: how a typed payload becomes bytes on the wire and back, and the
//! `Content-Type` header that names the codec, so that a message written in one codec and read
//! in another is a decode error naming both, never garbage.
//!
//! A declaration picks its codec by name (`codec = "msgpack"`, JSON by default; a `Bytes` or
//! `Vec<u8>` payload is passed through as it is); [`Publish::encode`](crate::Publish::encode)
//! writes one. Each codec beyond JSON comes with the cargo feature of its name, which brings
//! its crate:
//!
//! | codec | type | feature | payload types | `Content-Type` |
//! |---|---|---|---|---|
//! | `"json"` (default) | [`Json`] | none | `serde` | `application/json` |
//! | `"msgpack"` | [`MsgPack`] | `msgpack` (`rmp-serde`) | `serde`; structs written as maps of field names | `application/msgpack` |
//! | `"cbor"` | [`Cbor`] | `cbor` (`ciborium`) | `serde` | `application/cbor` |
//! | `"protobuf"` | [`Protobuf`] | `protobuf` (`prost`) | `prost::Message + Default` | `application/protobuf` |
//!
//! Without its feature a codec's type exists but encodes and decodes nothing: a declaration
//! naming it fails to compile with a message that names the feature.

use std::error::Error as StdError;

use async_nats::HeaderMap;
use async_nats::header::HeaderName;
use bytes::Bytes;
pub use topology_core::codec::{CONTENT_TYPE_HEADER, CodecId};

/// An encoding or decoding failure, as the codec's crate reported it.
pub type CodecError = Box<dyn StdError + Send + Sync + 'static>;

/// The header naming a payload's codec.
pub const CONTENT_TYPE: HeaderName = HeaderName::from_static(CONTENT_TYPE_HEADER);

/// A payload codec: one of [`Json`], [`MsgPack`], [`Cbor`], [`Protobuf`].
pub trait Codec: Send + Sync + 'static {
    /// Which codec it is (its name and `Content-Type`).
    const ID: CodecId;
}

/// A codec that reads `T`.
#[diagnostic::on_unimplemented(
    message = "the codec `{Self}` cannot decode `{T}`",
    label = "`{T}` cannot be read with this codec",
    note = "JSON, MessagePack and CBOR read any `serde::de::DeserializeOwned` type, Protobuf any `prost::Message + Default`; MessagePack, CBOR and Protobuf each need the cargo feature of nats-topology named as the codec (`msgpack`, `cbor`, `protobuf`): `nats-topology = {{ version = \"..\", features = [\"msgpack\"] }}`"
)]
pub trait Decode<T>: Codec {
    /// `T` from `payload`.
    fn decode(payload: &Bytes) -> Result<T, CodecError>;
}

/// A codec that writes `T`.
#[diagnostic::on_unimplemented(
    message = "the codec `{Self}` cannot encode `{T}`",
    label = "`{T}` cannot be written with this codec",
    note = "JSON, MessagePack and CBOR write any `serde::Serialize` type, Protobuf any `prost::Message`; MessagePack, CBOR and Protobuf each need the cargo feature of nats-topology named as the codec (`msgpack`, `cbor`, `protobuf`)"
)]
pub trait Encode<T: ?Sized>: Codec {
    /// `value` as bytes.
    fn encode(value: &T) -> Result<Bytes, CodecError>;
}

/// JSON (`serde_json`), the default codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

/// MessagePack (`rmp-serde`; feature `msgpack`). Structs are written as maps of field names,
/// as other languages' MessagePack libraries read them; both maps and arrays are read.
#[derive(Debug, Clone, Copy, Default)]
pub struct MsgPack;

/// CBOR (`ciborium`; feature `cbor`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cbor;

/// Protocol Buffers (`prost`; feature `protobuf`): payload types that implement
/// `prost::Message` (decoded into `Default::default()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Protobuf;

impl Codec for Json {
    const ID: CodecId = CodecId::Json;
}
impl Codec for MsgPack {
    const ID: CodecId = CodecId::MsgPack;
}
impl Codec for Cbor {
    const ID: CodecId = CodecId::Cbor;
}
impl Codec for Protobuf {
    const ID: CodecId = CodecId::Protobuf;
}

impl<T: serde::de::DeserializeOwned> Decode<T> for Json {
    fn decode(payload: &Bytes) -> Result<T, CodecError> {
        Ok(serde_json::from_slice(payload)?)
    }
}
impl<T: serde::Serialize + ?Sized> Encode<T> for Json {
    fn encode(value: &T) -> Result<Bytes, CodecError> {
        Ok(serde_json::to_vec(value)?.into())
    }
}

#[cfg(feature = "msgpack")]
impl<T: serde::de::DeserializeOwned> Decode<T> for MsgPack {
    fn decode(payload: &Bytes) -> Result<T, CodecError> {
        Ok(rmp_serde::from_slice(payload)?)
    }
}
#[cfg(feature = "msgpack")]
impl<T: serde::Serialize + ?Sized> Encode<T> for MsgPack {
    fn encode(value: &T) -> Result<Bytes, CodecError> {
        Ok(rmp_serde::to_vec_named(value)?.into())
    }
}

#[cfg(feature = "cbor")]
impl<T: serde::de::DeserializeOwned> Decode<T> for Cbor {
    fn decode(payload: &Bytes) -> Result<T, CodecError> {
        Ok(ciborium::from_reader(&payload[..])?)
    }
}
#[cfg(feature = "cbor")]
impl<T: serde::Serialize + ?Sized> Encode<T> for Cbor {
    fn encode(value: &T) -> Result<Bytes, CodecError> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out)?;
        Ok(out.into())
    }
}

#[cfg(feature = "protobuf")]
impl<T: prost::Message + Default> Decode<T> for Protobuf {
    fn decode(payload: &Bytes) -> Result<T, CodecError> {
        Ok(T::decode(payload.clone())?)
    }
}
#[cfg(feature = "protobuf")]
impl<T: prost::Message> Encode<T> for Protobuf {
    fn encode(value: &T) -> Result<Bytes, CodecError> {
        Ok(value.encode_to_vec().into())
    }
}

/// A message whose `Content-Type` names another codec than the one that reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The codec that reads it.
    pub expected: CodecId,
    /// The header's value.
    pub received: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let expected = self.expected;
        write!(
            f,
            "its Content-Type is `{}` but this handler reads `{}` (codec = \"{}\"): publish it as `{}` (`Publish::encode` writes the header), or declare the handler's `codec` to match",
            self.received,
            expected.content_type(),
            expected.name(),
            expected.content_type(),
        )
    }
}

impl StdError for Mismatch {}

/// Whether `headers` allow `expected` to read the payload: a missing `Content-Type` does (a
/// client that writes none is read as the declaration says); one naming another codec does not.
pub fn check_content_type(expected: CodecId, headers: Option<&HeaderMap>) -> Result<(), Mismatch> {
    let Some(received) = headers.and_then(|h| h.get(CONTENT_TYPE)) else {
        return Ok(());
    };
    let received = received.as_str();
    if expected.accepts(received) {
        Ok(())
    } else {
        Err(Mismatch {
            expected,
            received: received.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Order {
        id: u64,
        item: String,
    }

    fn order() -> Order {
        Order {
            id: 7,
            item: "tea".into(),
        }
    }

    #[test]
    fn json_round_trips() {
        let bytes = <Json as Encode<Order>>::encode(&order()).unwrap();
        assert_eq!(&bytes[..], br#"{"id":7,"item":"tea"}"#);
        assert_eq!(<Json as Decode<Order>>::decode(&bytes).unwrap(), order());
    }

    #[cfg(feature = "msgpack")]
    #[test]
    fn msgpack_writes_structs_as_maps_of_field_names() {
        let bytes = <MsgPack as Encode<Order>>::encode(&order()).unwrap();
        // fixmap of 2, "id" -> 7, "item" -> "tea".
        assert_eq!(
            &bytes[..],
            &[
                0x82, 0xa2, b'i', b'd', 7, 0xa4, b'i', b't', b'e', b'm', 0xa3, b't', b'e', b'a'
            ]
        );
        assert_eq!(<MsgPack as Decode<Order>>::decode(&bytes).unwrap(), order());
    }

    #[cfg(feature = "cbor")]
    #[test]
    fn cbor_round_trips() {
        let bytes = <Cbor as Encode<Order>>::encode(&order()).unwrap();
        assert_eq!(bytes[0], 0xa2, "a map of two entries");
        assert_eq!(<Cbor as Decode<Order>>::decode(&bytes).unwrap(), order());
    }

    #[test]
    fn a_missing_header_is_read_as_declared_and_another_codecs_is_refused() {
        assert_eq!(check_content_type(CodecId::MsgPack, None), Ok(()));
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/json");
        let refused = check_content_type(CodecId::MsgPack, Some(&headers)).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.contains("`application/json`") && text.contains("`application/msgpack`"),
            "{text}"
        );
        assert_eq!(check_content_type(CodecId::Json, Some(&headers)), Ok(()));
    }
}
