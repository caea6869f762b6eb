//! `ansible-operator plan -f cr.yaml`: sends the proposed CR to a running operator's API
//! (`POST …/plan`) and prints the plan as people read it.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::PlanArgs;

/// Longest answer read.
const MAX_ANSWER: usize = 16 << 20;

/// The API's answer to a plan.
#[derive(Debug, Deserialize)]
struct Answer {
    result: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    record: Option<String>,
    #[serde(flatten)]
    plan: crate::plan::Plan,
}

/// Runs the subcommand: 0 when the plan ran and no task failed, 1 otherwise.
pub fn main(args: &PlanArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(plan(args)) {
        Ok(answer) => {
            print!("{}", crate::plan::render(&answer.plan));
            if let Some(message) = &answer.message {
                println!("{message}");
            }
            if let Some(record) = &answer.record {
                println!("kept as AnsibleRun {record}");
            }
            if answer.result == "Successful" { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn plan(args: &PlanArgs) -> anyhow::Result<Answer> {
    let file = &args.filename;
    let text = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
    let object: Value =
        serde_saphyr::from_slice(&text).with_context(|| format!("parse {}", file.display()))?;
    let field = |path: &str| object.pointer(path).and_then(Value::as_str).map(str::to_string);
    let api_version = field("/apiVersion").context("the CR has no apiVersion")?;
    let kind = field("/kind").context("the CR has no kind")?;
    let name = field("/metadata/name").context("the CR has no metadata.name")?;
    let token = token(args)?;
    let kinds = answer_of(send(args, "GET", "/api/v1/kinds", &token, None).await?)?;
    let kind_path = kind_path(&kinds, &api_version, &kind)
        .with_context(|| format!("the operator does not watch {kind} ({api_version})"))?;
    let namespace = field("/metadata/namespace").unwrap_or_else(|| "default".to_string());
    let path = format!("{kind_path}/crs/{namespace}/{name}/plan");
    let body = serde_json::to_vec(&object)?;
    let answer = answer_of(send(args, "POST", &path, &token, Some(&body)).await?)?;
    serde_json::from_value(answer).context("read the API's answer")
}

/// The JSON of a 200 answer; another answer's message as the error.
fn answer_of((status, body): (u16, Vec<u8>)) -> anyhow::Result<Value> {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status != 200 {
        let message = json["message"].as_str().map(str::to_string);
        bail!(
            "the API answered {status}: {}",
            message.unwrap_or_else(|| String::from_utf8_lossy(&body).into())
        );
    }
    Ok(json)
}

/// The API path of the watched kind of `api_version` and `kind`, from `GET /api/v1/kinds`.
fn kind_path(kinds: &Value, api_version: &str, kind: &str) -> Option<String> {
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    kinds["kinds"]
        .as_array()?
        .iter()
        .find(|k| k["group"] == group && k["kind"] == kind)
        .and_then(|k| k["path"].as_str())
        .map(str::to_string)
}

/// `--token`, else the token of the kubeconfig's current user.
fn token(args: &PlanArgs) -> anyhow::Result<String> {
    if let Some(token) = &args.token {
        return Ok(token.clone());
    }
    let path = args.kubeconfig.as_ref().context("give --token or a --kubeconfig whose user has a token")?;
    let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let config: Value =
        serde_saphyr::from_slice(&text).with_context(|| format!("parse {}", path.display()))?;
    kubeconfig_token(&config).context("the kubeconfig's current user has no token: give --token")
}

/// The `token` of the kubeconfig's current context's user.
fn kubeconfig_token(config: &Value) -> Option<String> {
    let named = |list: &str, name: &Value| {
        config[list].as_array()?.iter().find(|entry| &entry["name"] == name).cloned()
    };
    let context = named("contexts", &config["current-context"])?;
    let user = named("users", &context["context"]["user"])?;
    user["user"]["token"].as_str().map(str::to_string)
}

/// Sends a request (with `body` as JSON) to the API with the token; the status and body of the answer.
async fn send(
    args: &PlanArgs,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let uri: http::Uri = args.api.parse().with_context(|| format!("--api {}", args.api))?;
    if uri.scheme_str() != Some("https") {
        bail!("--api must be an https:// address");
    }
    let host = uri.host().context("--api names no host")?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .with_context(|| format!("connect to {host}:{port}"))?;
    let name = ServerName::try_from(host.clone()).with_context(|| format!("a server name: {host}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(args)?));
    let stream = connector.connect(name, tcp).await.context("TLS handshake with the API")?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, host)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))?;
    let response = sender.send_request(request).await.context("no answer from the API")?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_ANSWER).collect().await;
    let body = body.map_err(|error| anyhow::anyhow!("read the API's answer: {error}"))?.to_bytes();
    Ok((status, body.to_vec()))
}

/// Verifies the API with `--cacert`, or not at all with `--insecure-skip-tls-verify`.
fn client_config(args: &PlanArgs) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    if args.insecure_skip_tls_verify {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth());
    }
    let cacert =
        args.cacert.as_ref().context("give --cacert (the API's CA) or --insecure-skip-tls-verify")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(cacert).with_context(|| format!("read {}", cacert.display()))? {
        roots.add(cert.with_context(|| format!("read {}", cacert.display()))?)?;
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// `--insecure-skip-tls-verify`: any certificate (signatures are still checked).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_crs_kind_is_found_among_the_watched_kinds() {
        let kinds = json!({"kinds": [
            {"group": "cache.example.com", "kind": "Memcached", "path": "/api/v1/kinds/cache.example.com/memcacheds"},
            {"group": "", "kind": "ConfigMap", "path": "/api/v1/kinds/core/configmaps"}]});
        let path = kind_path(&kinds, "cache.example.com/v1alpha1", "Memcached");
        assert_eq!(path.as_deref(), Some("/api/v1/kinds/cache.example.com/memcacheds"));
        assert_eq!(kind_path(&kinds, "v1", "ConfigMap").as_deref(), Some("/api/v1/kinds/core/configmaps"));
        assert_eq!(kind_path(&kinds, "other.example.com/v1", "Memcached"), None);
    }

    #[test]
    fn the_token_is_the_current_users() {
        let config = json!({"current-context": "b",
            "contexts": [{"name": "a", "context": {"user": "ua"}}, {"name": "b", "context": {"user": "ub"}}],
            "users": [{"name": "ua", "user": {"token": "ta"}}, {"name": "ub", "user": {"token": "tb"}}]});
        assert_eq!(kubeconfig_token(&config).as_deref(), Some("tb"));
        let certificate = json!({"current-context": "a", "contexts": [{"name": "a", "context": {"user": "ua"}}],
            "users": [{"name": "ua", "user": {"client-certificate": "c"}}]});
        assert_eq!(kubeconfig_token(&certificate), None);
    }
}
