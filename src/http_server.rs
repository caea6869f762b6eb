//! The operator's own small HTTP/1.1 servers (metrics, user metrics, health probes, the API):
//! controller-runtime style bind addresses, the accept loop (plain or TLS), and plain-text answers.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Content type of the plain-text answers (errors, probes).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// How long a client may take to send its request headers (upstream's apiserver uses 5s too).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Response body of these servers.
pub type Body = Full<Bytes>;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address is neither `0` nor `[host]:port`.
    #[error("invalid bind address {address:?}: expected \"[host]:port\" or \"0\" to disable")]
    Address {
        /// The address as given.
        address: String,
    },
    /// The port is taken, not allowed, or the host does not resolve.
    #[error("listen on {address}")]
    Listen {
        /// The address as given.
        address: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A parsed bind address: host (empty for all interfaces) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindAddress {
    /// Host name or IP literal (IPv6 without brackets); `0.0.0.0` when the address had no host.
    pub host: String,
    /// TCP port; 0 picks a free one.
    pub port: u16,
}

/// Parses a controller-runtime style address: `"0"` disables the server (`None`), `":8443"` means
/// every interface, `"127.0.0.1:8080"`, `"localhost:8080"` and `"[::1]:8080"` name a host.
pub fn parse_address(address: &str) -> Result<Option<BindAddress>, Error> {
    let invalid = || Error::Address { address: address.to_string() };
    if address == "0" {
        return Ok(None);
    }
    let (host, port) = address.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse::<u16>().map_err(|_| invalid())?;
    let host = match host {
        "" => "0.0.0.0",
        bracketed if bracketed.starts_with('[') => {
            bracketed.strip_prefix('[').and_then(|h| h.strip_suffix(']')).ok_or_else(invalid)?
        }
        // An unbracketed IPv6 literal would make the port ambiguous.
        plain if plain.contains(':') => return Err(invalid()),
        plain => plain,
    };
    Ok(Some(BindAddress { host: host.to_string(), port }))
}

/// Binds a controller-runtime style address (see [`parse_address`]); `Ok(None)` when it is `"0"`.
pub async fn bind(address: &str) -> Result<Option<TcpListener>, Error> {
    let Some(parsed) = parse_address(address)? else {
        return Ok(None);
    };
    let listener = TcpListener::bind((parsed.host.as_str(), parsed.port))
        .await
        .map_err(|source| Error::Listen { address: address.to_string(), source })?;
    Ok(Some(listener))
}

/// Who a request came from, in its extensions: the address, and whether the TLS client presented a
/// certificate the server's client verifier accepted (see [`crate::tls::server`]).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The client's address.
    pub address: std::net::SocketAddr,
    /// Whether it presented a verified client certificate.
    pub verified_certificate: bool,
}

/// Accepts connections on `listener` (through TLS when given) and answers each request with
/// `handler` until `shutdown`. Each request carries its [`Peer`].
pub(crate) async fn serve<H, F, B>(
    name: &'static str,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(server = name, %address, "listening");
    loop {
        let (stream, address) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(server = name, %error, "accept failed");
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let handler = handler.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    let peer = Peer { address, verified_certificate: false };
                    serve_connection(name, stream, peer, handler, shutdown).await
                }
                Some(tls) => match tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        // rustls hands certificates on only once its client verifier accepted them.
                        let verified_certificate = stream.get_ref().1.peer_certificates().is_some();
                        let peer = Peer { address, verified_certificate };
                        serve_connection(name, stream, peer, handler, shutdown).await
                    }
                    Ok(Err(error)) => tracing::debug!(server = name, %error, "TLS handshake failed"),
                    Err(_) => tracing::debug!(server = name, "TLS handshake timed out"),
                },
            }
        });
    }
}

/// Answers the requests of one connection until it ends or `shutdown`.
async fn serve_connection<I, H, F, B>(
    name: &'static str,
    io: I,
    peer: Peer,
    handler: H,
    shutdown: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(peer);
        let response = handler(request);
        async move { Ok::<_, Infallible>(response.await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => if let Err(error) = result {
            tracing::debug!(server = name, %error, "connection ended");
        },
        // Finish the request in progress, then close idle keep-alive connections.
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// A response with a body and content type.
pub fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A plain-text response; the message gets a trailing newline like Go's `http.Error`.
pub fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = respond(status, TEXT_CONTENT_TYPE, format!("{message}\n"));
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// `404 Not Found`.
pub fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found")
}

/// `405 Method Not Allowed` naming the one allowed method.
pub fn method_not_allowed(allowed: &'static str) -> Response<Body> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
    response
}

/// A one-request HTTP/1.1 client for the server tests.
#[cfg(test)]
pub(crate) mod test_client {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A parsed response.
    #[derive(Debug)]
    pub(crate) struct Reply {
        pub status: u16,
        pub headers: Vec<(String, String)>,
        pub body: String,
    }

    impl Reply {
        /// The first header with this (lower-case) name.
        pub(crate) fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
        }
    }

    /// Binds 127.0.0.1 on a free port.
    pub(crate) async fn listener() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("local address");
        (listener, address)
    }

    /// Sends one request with `Connection: close` and reads the whole response.
    pub(crate) async fn request(address: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("write head");
        stream.write_all(body.as_bytes()).await.expect("write body");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.expect("read response");
        let (head, body) = raw.split_once("\r\n\r\n").expect("response has a head");
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .expect("status line");
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        Reply { status, headers, body: body.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::test_client::listener;
    use super::*;

    fn parsed(host: &str, port: u16) -> Option<BindAddress> {
        Some(BindAddress { host: host.to_string(), port })
    }

    #[test]
    fn port_only_address_binds_every_interface() {
        assert_eq!(parse_address(":8443").unwrap(), parsed("0.0.0.0", 8443));
    }

    #[test]
    fn host_and_port_address_binds_that_host() {
        assert_eq!(parse_address("127.0.0.1:8080").unwrap(), parsed("127.0.0.1", 8080));
        assert_eq!(parse_address("localhost:6789").unwrap(), parsed("localhost", 6789));
        assert_eq!(parse_address("[::1]:9090").unwrap(), parsed("::1", 9090));
    }

    #[test]
    fn zero_address_disables_the_server() {
        assert_eq!(parse_address("0").unwrap(), None);
    }

    #[test]
    fn malformed_addresses_are_rejected() {
        for address in ["", "8443", ":http", ":70000", "::1:80", "[::1:80", "host:"] {
            assert!(
                matches!(parse_address(address), Err(Error::Address { .. })),
                "{address:?} should be rejected"
            );
        }
    }

    #[tokio::test]
    async fn bind_returns_none_for_zero_and_a_listener_otherwise() {
        assert!(bind("0").await.unwrap().is_none());
        let listener = bind("127.0.0.1:0").await.unwrap().expect("a listener");
        assert!(listener.local_addr().unwrap().ip().is_loopback());
    }

    #[tokio::test]
    async fn bind_on_a_taken_port_names_the_address() {
        let (_taken, address) = listener().await;
        let error = bind(&address.to_string()).await.unwrap_err();
        assert!(matches!(error, Error::Listen { .. }));
        assert_eq!(error.to_string(), format!("listen on {address}"));
    }
}
