//! Checks of the values and files the variables name, before connecting.

use std::path::{Path, PathBuf};

use async_nats::rustls::pki_types::CertificateDer;
use async_nats::rustls::pki_types::pem::PemObject;

use super::{
    EnvError, EnvErrorKind, NATS_CA, NATS_CERT, NATS_CREDS, NATS_INBOX_PREFIX, NATS_KEY, NATS_NKEY,
};

/// The inbox prefix must be a literal subject: replies go to `<prefix>.<id>`.
pub(super) fn check_inbox_prefix(prefix: &str) -> Result<(), EnvError> {
    topology_core::subject::check_subject(prefix).map_err(|e| {
        EnvError::new(
            EnvErrorKind::Invalid,
            NATS_INBOX_PREFIX,
            format!(
                "NATS_INBOX_PREFIX is set to {prefix:?}, which is not a subject prefix ({}); \
                 set it to dot-separated tokens without wildcards, for example \
                 `_INBOX_billing`",
                e.message()
            ),
        )
    })
}

/// A path variable whose value looks like a secret (a seed, a JWT, a PEM block, several lines)
/// is refused without showing it: someone put the secret where its file's path belongs.
pub(super) fn check_is_a_path(variable: &'static str, value: &str) -> Result<(), EnvError> {
    let seed_like = value.len() == 58
        && value.starts_with('S')
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b));
    let content_like = value.contains('\n') || value.contains("-----") || value.starts_with("eyJ");
    if seed_like || content_like {
        return Err(EnvError::new(
            EnvErrorKind::Invalid,
            variable,
            format!(
                "{variable} holds what looks like a key or a file's content, not a path (its \
                 value is not shown): write it to a file and set {variable} to the file's path"
            ),
        ));
    }
    Ok(())
}

/// What to do about a file variable that names an unreadable file.
pub(super) fn file_hint(variable: &str) -> &'static str {
    match variable {
        NATS_CREDS => {
            "point NATS_CREDS at the user's credentials file (as `nsc generate creds` writes it), \
             or unset it"
        }
        NATS_NKEY => "point NATS_NKEY at a file holding the user's nkey seed, or unset it",
        NATS_CA => {
            "point NATS_CA at the PEM file of the CA that signed the server's certificate, or unset it"
        }
        NATS_CERT => {
            "point NATS_CERT at the client certificate's PEM file, or unset it and NATS_KEY"
        }
        NATS_KEY => {
            "point NATS_KEY at the client certificate's private key (PEM), or unset it and NATS_CERT"
        }
        _ => "point it at a readable file, or unset it",
    }
}

/// The bytes of the file a variable names, read off the async threads.
pub(super) async fn read_file(variable: &'static str, path: &str) -> Result<Vec<u8>, EnvError> {
    let owned = PathBuf::from(path);
    let read = tokio::task::spawn_blocking(move || std::fs::read(owned))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    read.map_err(|e| {
        EnvError::new(
            EnvErrorKind::Unreadable,
            variable,
            format!(
                "{variable} is set to `{}`, which cannot be read ({})",
                Path::new(path).display(),
                file_hint(variable)
            ),
        )
        .source(e)
    })
}

/// The text of the file a variable names (credentials and seeds are ASCII).
pub(super) async fn read_text(variable: &'static str, path: &str) -> Result<String, EnvError> {
    let bytes = read_file(variable, path).await?;
    String::from_utf8(bytes).map_err(|_| {
        EnvError::new(
            EnvErrorKind::Invalid,
            variable,
            format!("{variable} is set to `{path}`, which is not a text file"),
        )
    })
}

/// The first line of `text` that is a valid user nkey seed, as the `nats` CLI finds it in a
/// seed file (surrounding text and decoration allowed).
pub(super) fn user_seed(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("SU"))
        .find(|line| nkeys::KeyPair::from_seed(line).is_ok())
        .map(str::to_owned)
}

/// Whether `pem` holds at least one certificate and nothing unreadable.
pub(super) fn holds_certificates(pem: &[u8]) -> bool {
    let mut certificates = CertificateDer::pem_slice_iter(pem).peekable();
    certificates.peek().is_some() && certificates.all(|c| c.is_ok())
}

pub(super) fn not_pem(variable: &'static str, path: &str, what: &str) -> EnvError {
    EnvError::new(
        EnvErrorKind::Invalid,
        variable,
        format!(
            "{variable} is set to `{path}`, which does not hold {what} ({})",
            file_hint(variable)
        ),
    )
}
