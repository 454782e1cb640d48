//! Payload schemas: `#[queue_consumer]` and `#[broadcast]` register, per handler, a function
//! that describes its payload type. With the `schemars` feature and a payload type that
//! implements `schemars::JsonSchema`, it returns that type's JSON Schema; otherwise `None`
//! (the export writes an open schema). The choice is made where the macro expands, by
//! method resolution (autoref specialization), so no bound is forced on payload types.

use std::marker::PhantomData;

/// A payload type's JSON Schema (draft 7, as AsyncAPI schemas are), with the definitions it
/// refers to under `#/components/schemas/`.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadSchema {
    /// The schema (possibly a `$ref` into `definitions`).
    pub schema: serde_json::Value,
    /// The named schemas it refers to.
    pub definitions: serde_json::Map<String, serde_json::Value>,
}

/// Registered by the macros next to each consumer. Not public API.
pub struct PayloadSchemaRegistration {
    /// The handler's path, as in its `ConsumerDecl`.
    pub handler: &'static str,
    /// Its payload's schema, if known.
    pub schema: fn() -> Option<PayloadSchema>,
    /// Its payload's protobuf message name (`orders.v1.Order`), for a `prost::Name` type.
    pub protobuf_name: fn() -> Option<String>,
}

inventory::collect!(PayloadSchemaRegistration);

/// Registered by `#[endpoint]` next to its request's [`PayloadSchemaRegistration`]: the
/// schema of its reply. Not public API.
pub struct ReplySchemaRegistration {
    /// The handler's path, as in its `EndpointDecl`.
    pub handler: &'static str,
    /// Its reply's schema, if known.
    pub schema: fn() -> Option<PayloadSchema>,
    /// Its reply's protobuf message name, for a `prost::Name` type.
    pub protobuf_name: fn() -> Option<String>,
}

inventory::collect!(ReplySchemaRegistration);

/// The registered schema of `handler`'s payload (a consumer's message, an endpoint's request),
/// if any.
pub(crate) fn registered(handler: &str) -> Option<PayloadSchema> {
    inventory::iter::<PayloadSchemaRegistration>
        .into_iter()
        .find(|r| r.handler == handler)
        .and_then(|r| (r.schema)())
}

/// The registered protobuf message name of `handler`'s payload, if its type states one.
pub(crate) fn registered_protobuf_name(handler: &str) -> Option<String> {
    inventory::iter::<PayloadSchemaRegistration>
        .into_iter()
        .find(|r| r.handler == handler)
        .and_then(|r| (r.protobuf_name)())
}

/// The registered schema of the endpoint `handler`'s reply, if any.
pub(crate) fn registered_reply(handler: &str) -> Option<PayloadSchema> {
    inventory::iter::<ReplySchemaRegistration>
        .into_iter()
        .find(|r| r.handler == handler)
        .and_then(|r| (r.schema)())
}

/// The registered protobuf message name of the endpoint `handler`'s reply, if any.
pub(crate) fn registered_reply_protobuf_name(handler: &str) -> Option<String> {
    inventory::iter::<ReplySchemaRegistration>
        .into_iter()
        .find(|r| r.handler == handler)
        .and_then(|r| (r.protobuf_name)())
}

/// What generated code calls `payload_schema` on: `(&&SchemaProbe::<T>::new()).payload_schema()`
/// picks [`SchemaSpecialized`] when `T: JsonSchema` (with the `schemars` feature), else
/// [`SchemaFallback`].
pub struct SchemaProbe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> SchemaProbe<T> {
    /// A probe for `T`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        SchemaProbe(PhantomData)
    }
}

/// The payload type has no schema: `None`.
pub trait SchemaFallback {
    /// `None`.
    fn payload_schema(&self) -> Option<PayloadSchema> {
        None
    }
}

impl<T: ?Sized> SchemaFallback for SchemaProbe<T> {}

/// The payload type's schema (implemented with the `schemars` feature).
pub trait SchemaSpecialized {
    /// The schema.
    fn payload_schema(&self) -> Option<PayloadSchema>;
}

#[cfg(feature = "schemars")]
impl<T: schemars::JsonSchema + ?Sized> SchemaSpecialized for &SchemaProbe<T> {
    fn payload_schema(&self) -> Option<PayloadSchema> {
        Some(schema_of::<T>())
    }
}

/// The payload type states no protobuf message name: `None`.
pub trait NameFallback {
    /// `None`.
    fn protobuf_name(&self) -> Option<String> {
        None
    }
}

impl<T: ?Sized> NameFallback for SchemaProbe<T> {}

/// The payload type's protobuf message name (implemented, with the `protobuf` feature, for the
/// types that implement `prost::Name`, as `prost-build` generates with `enable_type_names`).
pub trait NameSpecialized {
    /// The message's full name, `package.Message`.
    fn protobuf_name(&self) -> Option<String>;
}

#[cfg(feature = "protobuf")]
impl<T: prost::Name> NameSpecialized for &SchemaProbe<T> {
    fn protobuf_name(&self) -> Option<String> {
        Some(T::full_name())
    }
}

/// `T`'s schema in draft 7, its definitions under `#/components/schemas/`.
#[cfg(feature = "schemars")]
pub fn schema_of<T: schemars::JsonSchema + ?Sized>() -> PayloadSchema {
    let mut generator = schemars::generate::SchemaSettings::draft07()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .into_generator();
    let schema = generator.subschema_for::<T>();
    let definitions = generator.take_definitions(true);
    PayloadSchema {
        schema: schema.to_value(),
        definitions,
    }
}
