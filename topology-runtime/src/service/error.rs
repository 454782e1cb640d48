//! [`ServiceError`]: what an endpoint answers instead of a reply, as the micro protocol's
//! `Nats-Service-Error` and `Nats-Service-Error-Code` headers.

use std::fmt;

/// The error an endpoint's handler returns: a status code and a description, sent to the
/// caller in the micro protocol's `Nats-Service-Error-Code` and `Nats-Service-Error` headers
/// with an empty body, and counted in `$SRV.STATS` as an error.
///
/// Any error converts into it with `?` as a 500 whose description is the error's text; say
/// what the caller did wrong with [`ServiceError::bad_request`] (400),
/// [`ServiceError::not_found`] (404) or [`ServiceError::new`] (any code). The runtime answers a
/// payload that does not decode with a 400 naming the type, a handler that panics with a 500,
/// and one that runs past the endpoint's `timeout` with a 504.
///
/// ```
/// use nats_topology::ServiceError;
///
/// fn lookup(id: &str) -> Result<u32, ServiceError> {
///     if id.is_empty() {
///         return Err(ServiceError::bad_request("the id is empty"));
///     }
///     let n: u32 = id.parse()?; // any std error: a 500
///     Ok(n)
/// }
/// assert_eq!(lookup("").unwrap_err().code(), 400);
/// assert_eq!(lookup("x").unwrap_err().code(), 500);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceError {
    code: u16,
    description: String,
}

impl ServiceError {
    /// An error with the given status code (HTTP's meanings, by convention) and description.
    pub fn new(code: u16, description: impl Into<String>) -> Self {
        ServiceError {
            code,
            description: description.into(),
        }
    }

    /// 400: the request is wrong; sending it again will not help.
    pub fn bad_request(description: impl Into<String>) -> Self {
        ServiceError::new(400, description)
    }

    /// 404: what the request names does not exist.
    pub fn not_found(description: impl Into<String>) -> Self {
        ServiceError::new(404, description)
    }

    /// 500: the service failed.
    pub fn internal(description: impl Into<String>) -> Self {
        ServiceError::new(500, description)
    }

    /// The status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The description.
    pub fn description(&self) -> &str {
        &self.description
    }
}

impl<E> From<E> for ServiceError
where
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    fn from(error: E) -> Self {
        ServiceError::internal(error.into().to_string())
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.description)
    }
}
