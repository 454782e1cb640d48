//! Certificates generated at test time (a CA, a server certificate for `127.0.0.1` and
//! `localhost`, a client certificate), written as PEM files into a server's store directory,
//! and the server's `tls { .. }` block.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::error::TestkitError;

/// How a server started with TLS treats clients; see
/// [`ServerBuilder::tls`](crate::ServerBuilder::tls) and
/// [`ServerBuilder::mutual_tls`](crate::ServerBuilder::mutual_tls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TlsMode {
    /// Clients must connect over TLS and verify the server with the CA (`verify: false`).
    Server,
    /// Clients must also present a certificate signed by the CA (`verify: true`).
    Mutual,
}

/// The PEM files of a server started with TLS, in its store directory (removed with it).
///
/// All certificates come from one CA generated when the server (or cluster) starts: the
/// server's certificate names `127.0.0.1` and `localhost` (subject alternative names), the
/// client certificate is for any client of the test's. A cluster's nodes share one set (each
/// node holds a copy in its own store directory).
///
/// ```no_run
/// use nats_topology_testkit::NatsServer;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = NatsServer::builder().mutual_tls().start().await?;
/// let tls = server.tls().expect("started with TLS");
/// // By hand, as a `nats` CLI user would: --tlsca, --tlscert, --tlskey.
/// let client = async_nats::ConnectOptions::new()
///     .add_root_certificates(tls.ca().to_path_buf())
///     .add_client_certificate(tls.client_cert().to_path_buf(), tls.client_key().to_path_buf())
///     .require_tls(true)
///     .connect(server.url()) // tls://127.0.0.1:<port>
///     .await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TlsFiles {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    verify: bool,
}

impl TlsFiles {
    /// The CA certificate (`ca.pem`): what a client trusts (`add_root_certificates`,
    /// `NATS_CA`), and what the server verifies client certificates against.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The client certificate (`client-cert.pem`), signed by the CA (`add_client_certificate`,
    /// `NATS_CERT`).
    pub fn client_cert(&self) -> &Path {
        &self.client_cert
    }

    /// The client certificate's private key (`client-key.pem`, PKCS#8; `NATS_KEY`).
    pub fn client_key(&self) -> &Path {
        &self.client_key
    }

    /// The server's certificate (`server-cert.pem`), for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> &Path {
        &self.server_cert
    }

    /// The server certificate's private key (`server-key.pem`).
    pub fn server_key(&self) -> &Path {
        &self.server_key
    }

    /// Whether the server requires client certificates (mutual TLS, `verify: true`).
    pub fn verifies_clients(&self) -> bool {
        self.verify
    }

    /// Options of a client that trusts the CA, presents the client certificate and requires
    /// TLS: enough to connect to the server whether or not it verifies clients.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder().tls().start().await?;
    /// let tls = server.tls().expect("started with TLS");
    /// let client = tls.connect_options().connect(server.url()).await?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_options(&self) -> async_nats::ConnectOptions {
        async_nats::ConnectOptions::new()
            .add_root_certificates(self.ca.clone())
            .add_client_certificate(self.client_cert.clone(), self.client_key.clone())
            .require_tls(true)
    }

    /// The server's `tls { .. }` configuration block. Without `allow_non_tls`, a server with a
    /// `tls` block refuses clients that do not upgrade to TLS.
    pub(crate) fn config_block(&self) -> String {
        format!(
            "tls {{\n  cert_file: {}\n  key_file: {}\n  ca_file: {}\n  verify: {}\n  timeout: 5\n}}\n",
            quoted(&self.server_cert),
            quoted(&self.server_key),
            quoted(&self.ca),
            self.verify
        )
    }
}

/// A path as a quoted string of the server's configuration format.
fn quoted(path: &Path) -> String {
    serde_json::to_string(&path.to_string_lossy()).expect("a string serializes")
}

/// One CA and the certificates it signed, as PEM text; written into each server's directory.
pub(crate) struct Certificates {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

impl Certificates {
    /// A new CA (ECDSA P-256), a server certificate for `127.0.0.1` and `localhost` and a client
    /// certificate, both signed by the CA.
    pub(crate) fn generate() -> Result<Certificates, TestkitError> {
        let failed = |what: &str, e: rcgen::Error| TestkitError::Certificates {
            reason: format!("{what}: {e}"),
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| failed("the CA's parameters", e))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "nats-topology-testkit CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(|e| failed("the CA's key", e))?;
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| failed("the CA's certificate", e))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |sans: Vec<String>, name: &str, usage: ExtendedKeyUsagePurpose| {
            let mut params =
                CertificateParams::new(sans).map_err(|e| failed("a certificate's names", e))?;
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![usage];
            params.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().map_err(|e| failed("a certificate's key", e))?;
            let cert = params
                .signed_by(&key, &issuer)
                .map_err(|e| failed("signing a certificate", e))?;
            Ok::<_, TestkitError>((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = leaf(
            Vec::new(),
            "nats-topology-testkit client",
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Certificates {
            ca: ca.pem(),
            server_cert,
            server_key,
            client_cert,
            client_key,
        })
    }

    /// Writes the PEM files into `dir` (a server's store directory).
    pub(crate) fn write(&self, dir: &Path, mode: TlsMode) -> Result<TlsFiles, TestkitError> {
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server-cert.pem"),
            server_key: dir.join("server-key.pem"),
            client_cert: dir.join("client-cert.pem"),
            client_key: dir.join("client-key.pem"),
            verify: mode == TlsMode::Mutual,
        };
        for (path, pem) in [
            (&files.ca, &self.ca),
            (&files.server_cert, &self.server_cert),
            (&files.server_key, &self.server_key),
            (&files.client_cert, &self.client_cert),
            (&files.client_key, &self.client_key),
        ] {
            fs::write(path, pem)
                .map_err(|e| TestkitError::io(format!("writing {}", path.display()), e))?;
        }
        Ok(files)
    }
}
