//! TLS for the operator's own HTTPS servers (the API and console, secure metrics): the certificate
//! and key in a directory (`tls.crt`, `tls.key`, PEM), read again whenever either file changes (a
//! rotated cert-manager Secret takes effect without a restart), or a self-signed certificate made
//! at start and logged by its SHA-256 fingerprint.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificate file in a certificate directory.
pub const CERT_FILE: &str = "tls.crt";
/// The CA file in a certificate directory (as cert-manager writes it), when there is one.
pub const CA_FILE: &str = "ca.crt";
/// The key file in a certificate directory.
pub const KEY_FILE: &str = "tls.key";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate or key file could not be read or parsed.
    #[error("read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The self-signed certificate could not be made.
    #[error("make a self-signed certificate: {0}")]
    SelfSigned(String),
}

/// A server configuration and the SHA-256 fingerprint of the certificate it starts with.
pub struct Server {
    /// For tokio-rustls's acceptor.
    pub config: Arc<rustls::ServerConfig>,
    /// `AA:BB:...`, for the log.
    pub fingerprint: String,
    /// The CA a client trusts the certificate by (PEM), for a webhook's `caBundle`: the
    /// self-signed certificate itself, or the directory's `ca.crt`, else its `tls.crt`.
    pub ca_pem: Vec<u8>,
}

/// A TLS server configuration: from `cert_dir` when given (re-read on change), else self-signed
/// for `names`. HTTP/1.1 only. With `client_ca` (PEM), a client may present a certificate signed
/// by it, and one that does not verify ends the handshake; presenting none stays allowed (a
/// handler asks [`crate::http_server::Peer`] whether one was verified).
pub fn server(cert_dir: Option<&Path>, names: &[String], client_ca: Option<&Path>) -> Result<Server, Error> {
    let (resolver, ca_pem) = match cert_dir {
        Some(dir) => {
            let ca = [dir.join(CA_FILE), dir.join(CERT_FILE)]
                .into_iter()
                .find_map(|path| std::fs::read(path).ok());
            (Resolver::from_dir(dir)?, ca.unwrap_or_default())
        }
        None => Resolver::self_signed(names)?,
    };
    let fingerprint = resolver.fingerprint();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::SelfSigned(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Server { config: Arc::new(config), fingerprint, ca_pem })
}

/// A verifier of client certificates signed by the CA in `path`, which lets a client present none.
fn client_verifier(
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, Error> {
    let read = |reason: String| Error::Read { path: path.to_path_buf(), reason };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| read(e.to_string()))? {
        roots.add(cert.map_err(|e| read(e.to_string()))?).map_err(|e| read(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(read("no CA certificate in it".into()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| read(e.to_string()))
}

/// Files and their modification times, when the certificate came from a directory.
#[derive(Debug)]
struct Source {
    dir: PathBuf,
    stamp: (Option<SystemTime>, Option<SystemTime>),
}

/// Serves the current certificate; re-reads the directory's files when they change.
#[derive(Debug)]
struct Resolver {
    current: Mutex<Arc<CertifiedKey>>,
    source: Option<Mutex<Source>>,
}

impl Resolver {
    fn from_dir(dir: &Path) -> Result<Resolver, Error> {
        let key = load(dir)?;
        let stamp = stamp(dir);
        Ok(Resolver {
            current: Mutex::new(Arc::new(key)),
            source: Some(Mutex::new(Source { dir: dir.to_path_buf(), stamp })),
        })
    }

    fn self_signed(names: &[String]) -> Result<(Resolver, Vec<u8>), Error> {
        let made = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| Error::SelfSigned(e.to_string()))?;
        let cert = CertificateDer::from(made.cert.der().to_vec());
        let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
            .map_err(|e| Error::SelfSigned(e.to_string()))?;
        let signer = any_supported_type(&key).map_err(|e| Error::SelfSigned(e.to_string()))?;
        let resolver =
            Resolver { current: Mutex::new(Arc::new(CertifiedKey::new(vec![cert], signer))), source: None };
        Ok((resolver, made.cert.pem().into_bytes()))
    }

    fn fingerprint(&self) -> String {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        current.cert.first().map(|der| fingerprint(der)).unwrap_or_default()
    }

    /// Re-reads the directory when a file changed; a broken new pair keeps the old one (logged).
    fn refresh(&self) {
        let Some(source) = &self.source else { return };
        let mut source = source.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamp(&source.dir);
        if now == source.stamp {
            return;
        }
        source.stamp = now;
        match load(&source.dir) {
            Ok(key) => {
                let fingerprint = key.cert.first().map(|der| fingerprint(der)).unwrap_or_default();
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                tracing::info!(dir = %source.dir.display(), fingerprint, "serving the renewed certificate");
            }
            Err(error) => {
                tracing::warn!(%error, "the changed certificate could not be read: keeping the previous one")
            }
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh();
        Some(self.current.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

fn stamp(dir: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let modified = |name| std::fs::metadata(dir.join(name)).and_then(|m| m.modified()).ok();
    (modified(CERT_FILE), modified(KEY_FILE))
}

fn load(dir: &Path) -> Result<CertifiedKey, Error> {
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    let read = |path: &Path, reason: String| Error::Read { path: path.to_path_buf(), reason };
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| read(&cert_path, e.to_string()))?;
    if certs.is_empty() {
        return Err(read(&cert_path, "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| read(&key_path, e.to_string()))?;
    let signer = any_supported_type(&key).map_err(|e| read(&key_path, e.to_string()))?;
    Ok(CertifiedKey::new(certs, signer))
}

/// The SHA-256 fingerprint of a DER certificate, as `AA:BB:...`.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_is_made_and_fingerprinted() {
        let server = server(None, &["localhost".to_string()], None).unwrap();
        assert_eq!(server.fingerprint.len(), 32 * 3 - 1);
    }

    #[test]
    fn a_directory_pair_is_read_and_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("ao-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str| {
            let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
            std::fs::write(dir.join(CERT_FILE), made.cert.pem()).unwrap();
            std::fs::write(dir.join(KEY_FILE), made.signing_key.serialize_pem()).unwrap();
        };
        write("first");
        let resolver = Resolver::from_dir(&dir).unwrap();
        let first = resolver.fingerprint();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write("second");
        resolver.refresh();
        assert_ne!(resolver.fingerprint(), first, "the new pair is served");
        std::fs::write(dir.join(KEY_FILE), "garbage").unwrap();
        resolver.refresh();
        assert_ne!(resolver.fingerprint(), first, "a broken pair keeps the last good one");
        let error = Resolver::from_dir(&dir).unwrap_err().to_string();
        assert!(error.contains("tls.key"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
