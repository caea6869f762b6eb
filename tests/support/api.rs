//! The operator's HTTPS API as its users reach it: curl with a ServiceAccount's token from
//! `kubectl create token`, RBAC made with kubectl.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{kubectl, kubectl_ok};

/// An HTTPS endpoint of one operator (its API, or its secure metrics): where, and the CA file to
/// trust (`None`: its self-signed certificate, not verified).
#[derive(Debug, Clone)]
pub struct ApiServer {
    /// The host (`localhost`, or a Pod's IP).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The certificate to verify the server with.
    pub cacert: Option<PathBuf>,
}

/// A status code and a body (JSON when it parses, else a string).
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

impl ApiServer {
    /// An operator's endpoint on this machine.
    pub fn localhost(port: u16, cacert: Option<PathBuf>) -> ApiServer {
        ApiServer { host: "localhost".into(), port, cacert }
    }

    /// `https://<host>:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.host, self.port)
    }

    fn curl(&self) -> Command {
        let mut curl = Command::new("curl");
        // A plan answers when its playbook has run: over 120 s for four SSH hosts beside CI's
        // other lanes on two cores.
        curl.args(["--silent", "--show-error", "--max-time", "300"]);
        match &self.cacert {
            Some(cacert) => curl.arg("--cacert").arg(cacert),
            None => curl.arg("--insecure"),
        };
        curl
    }

    /// One request with an optional bearer token.
    pub fn request(&self, method: &str, path: &str, token: Option<&str>) -> Reply {
        self.request_with_body(method, path, token, None)
    }

    /// One request with an optional bearer token and an optional JSON body.
    pub fn request_with_body(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let mut curl = self.curl();
        curl.args(["--request", method, "--write-out", "\n%{http_code}", &self.url(path)]);
        if let Some(token) = token {
            curl.args(["--header", &format!("Authorization: Bearer {token}")]);
        }
        if let Some(body) = body {
            curl.args(["--header", "Content-Type: application/json", "--data-binary", &body.to_string()]);
        }
        let output = curl.output().expect("run curl");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "curl {method} {path}: {}", String::from_utf8_lossy(&output.stderr));
        let (body, status) = text.rsplit_once('\n').expect("curl wrote the status code");
        let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
        Reply { status: status.trim().parse().expect("a status code"), body }
    }

    /// GET that must answer 200; its body.
    pub fn get_ok(&self, path: &str, token: &str) -> Value {
        let reply = self.request("GET", path, Some(token));
        assert_eq!(reply.status, 200, "GET {path}: {}", reply.body);
        reply.body
    }

    /// Waits until the API answers (the operator has started).
    pub fn wait_until_up(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut curl = self.curl();
            let output = curl.args(["--output", "/dev/null", &self.url("/")]).output().expect("run curl");
            if output.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "the API on port {} did not come up", self.port);
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Follows a run's log as Server-Sent Events: each event's (type, data) with the time it came.
    pub fn follow(&self, path: &str, token: &str) -> EventStream {
        let mut child = self
            .curl()
            .args(["--no-buffer", "--max-time", "120", "--header", "Accept: text/event-stream"])
            .args(["--header", &format!("Authorization: Bearer {token}"), &self.url(path)])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start curl");
        let stdout = child.stdout.take().expect("curl's stdout");
        let (sender, events) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut kind, mut data) = (String::new(), Vec::new());
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(value) = line.strip_prefix("event:") {
                    kind = value.trim().to_string();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value).to_string());
                } else if line.is_empty() && !kind.is_empty() {
                    let event =
                        (std::mem::take(&mut kind), std::mem::take(&mut data).join("\n"), Instant::now());
                    if sender.send(event).is_err() {
                        break;
                    }
                }
            }
        });
        EventStream { child, events }
    }
}

/// A running SSE request.
pub struct EventStream {
    child: Child,
    /// (event type, data, when it arrived).
    pub events: mpsc::Receiver<(String, String, Instant)>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A ServiceAccount in `namespace` whose Role allows `verbs` on `resource` there; its token.
pub fn service_account(namespace: &str, name: &str, verbs: &str, resource: &str) -> String {
    kubectl_ok(["-n", namespace, "create", "serviceaccount", name]);
    kubectl_ok([
        "-n",
        namespace,
        "create",
        "role",
        name,
        &format!("--verb={verbs}"),
        &format!("--resource={resource}"),
    ]);
    let account = format!("{namespace}:{name}");
    kubectl_ok([
        "-n",
        namespace,
        "create",
        "rolebinding",
        name,
        &format!("--role={name}"),
        &format!("--serviceaccount={account}"),
    ]);
    for verb in verbs.split(',') {
        wait_until_allowed(namespace, name, verb, resource, "");
    }
    kubectl_ok(["-n", namespace, "create", "token", name, "--duration=1h"]).trim().to_string()
}

/// Waits until the apiserver's authorizer has taken in a new binding: RBAC reads bindings from a
/// cache, so a request made right after `create rolebinding` can still be refused.
/// `subresource` is `""` for the resource itself.
fn wait_until_allowed(namespace: &str, name: &str, verb: &str, resource: &str, subresource: &str) {
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let args = ["-n", namespace, "auth", "can-i", verb, resource, "--as", &user];
        let answer = kubectl(args.iter().chain(&[&*format!("--subresource={subresource}")]));
        if answer.status.success() {
            return;
        }
        assert!(Instant::now() < deadline, "{user} still may not {verb} {resource} {subresource} after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lets the ServiceAccount `name` of `namespace` read run logs of `resource` (`plural.group`) there:
/// a Role granting `get` on `<resource>/log`, as README's Security section shows, and its binding.
pub fn grant_log_reading(namespace: &str, name: &str, resource: &str) {
    let role = format!("{name}-log-reader");
    kubectl_ok([
        "-n",
        namespace,
        "create",
        "role",
        &role,
        "--verb=get",
        &format!("--resource={resource}/log"),
    ]);
    kubectl_ok([
        "-n",
        namespace,
        "create",
        "rolebinding",
        &role,
        &format!("--role={role}"),
        &format!("--serviceaccount={namespace}:{name}"),
    ]);
    wait_until_allowed(namespace, name, "get", resource, "log");
}

/// A certificate and key for `localhost` in `dir` (`tls.crt`, `tls.key`), for `--api-cert-dir`.
pub fn certificate(dir: &Path) -> PathBuf {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("make a certificate");
    std::fs::create_dir_all(dir).expect("create the certificate dir");
    std::fs::write(dir.join("tls.crt"), made.cert.pem()).expect("write tls.crt");
    std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).expect("write tls.key");
    dir.join("tls.crt")
}
