//! Admission playbooks against the real API server and real Ansible: a watch with `validate:` makes
//! the operator apply a ValidatingWebhookConfiguration that calls it on 127.0.0.1; `kubectl apply`
//! of a CR its playbook fails is refused with the playbook's message, a valid one is created; with
//! the operator stopped, `validateFailurePolicy: Fail` refuses and `Ignore` lets a CR through.

use crate::support;

use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "admission.test.example.com";
const KIND: &str = "Cluster";
const WAIT: Duration = Duration::from_secs(120);

/// Deletes the cluster-wide configuration when the test ends, passed or not: it would refuse the
/// test group's CRs for anyone after it.
struct Configuration(String);

impl Drop for Configuration {
    fn drop(&mut self) {
        support::kubectl(["delete", "validatingwebhookconfiguration", &self.0, "--ignore-not-found"]);
    }
}

fn watches(policy: &str) -> String {
    format!(
        "{}  validate: {{fixtures}}/playbooks/admission_masters.yml\n  validateFailurePolicy: {policy}\n  validateTimeout: 20s\n",
        support::playbook_watch(GROUP, KIND, "validate.yml")
    )
}

fn start(policy: &str, namespace: &str, configuration: &str) -> Operator {
    OperatorConfig::new(&watches(policy), namespace)
        .arg("--api-bind-address=127.0.0.1:0")
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={configuration}"))
        .start()
}

/// Waits until the operator has applied the configuration with `policy`.
async fn wait_for_configuration(
    api: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    policy: &str,
    operator: &Operator,
) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some(config)) = api.get_opt(name).await {
            let webhooks = config.webhooks.unwrap_or_default();
            if webhooks.first().and_then(|w| w.failure_policy.as_deref()) == Some(policy) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no configuration {name} with {policy}; log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl apply` of a cluster with `masters` in `namespace`.
fn apply(namespace: &str, name: &str, masters: u32) -> Output {
    let dir = scratch_dir(&format!("{namespace}-{name}"));
    let file = dir.join("cr.json");
    let cr = serde_json::json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
        "metadata": {"name": name, "namespace": namespace}, "spec": {"masters": masters, "size": 1}});
    std::fs::write(&file, cr.to_string()).expect("write the CR");
    support::kubectl(["apply", "-f", file.to_str().expect("a UTF-8 path")])
}

#[tokio::test]
async fn a_validate_playbook_refuses_an_invalid_cr_with_its_message_and_the_failure_policy_applies_when_the_operator_is_down()
 {
    let Test { client, ns, api: _ } = Test::setup("admission").kind(GROUP, KIND).build().await;
    let configuration = Configuration(format!("{}-validate", ns.name));
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone());

    let mut operator = start("Fail", &ns.name, &configuration.0);
    wait_for_configuration(&webhooks, &configuration.0, "Fail", &operator).await;

    let refused = apply(&ns.name, "even", 2);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "an even cluster was admitted: {}\n{}",
        support::describe_output(&refused),
        operator.log()
    );
    assert!(
        stderr.contains("denied the request: spec.masters must be odd for etcd quorum, got 2"),
        "{}\nlog:\n{}",
        support::describe_output(&refused),
        operator.log()
    );

    let admitted = apply(&ns.name, "odd", 3);
    assert!(admitted.status.success(), "{}\nlog:\n{}", support::describe_output(&admitted), operator.log());
    let updated = apply(&ns.name, "odd", 4);
    assert!(
        !updated.status.success(),
        "an UPDATE to an even cluster was admitted: {}",
        support::describe_output(&updated)
    );
    assert!(
        String::from_utf8_lossy(&updated.stderr).contains("spec.masters must be odd for etcd quorum, got 4")
    );

    operator.kill();
    let down = apply(&ns.name, "down-fail", 2);
    assert!(
        !down.status.success(),
        "Fail let a CR through with the operator down: {}",
        support::describe_output(&down)
    );
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("failed calling webhook"),
        "{}",
        support::describe_output(&down)
    );

    let mut operator = start("Ignore", &ns.name, &configuration.0);
    wait_for_configuration(&webhooks, &configuration.0, "Ignore", &operator).await;
    operator.kill();
    let ignored = apply(&ns.name, "down-ignore", 2);
    assert!(
        ignored.status.success(),
        "Ignore refused a CR with the operator down: {}",
        support::describe_output(&ignored)
    );
}

/// A CA and a client certificate it signed (`ca.crt`; `client.crt`, `client.key`) in `dir`.
fn client_certificate(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let output =
            std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(output.status.success(), "openssl {args:?}: {}", support::describe_output(&output));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=test-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        ]
        .concat(),
    );
    openssl(
        &[&["req"], &ec[..], &["-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=kube-apiserver"]]
            .concat(),
    );
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.crt",
        "-days",
        "1",
        "-extfile",
        "client.ext",
    ]);
}

/// The webhook's answer to a review of a cluster with `masters`, sent with curl (`cert`: a client
/// certificate and key to present).
fn review(
    port: u16,
    kind: &str,
    namespace: &str,
    masters: u32,
    cert: Option<&std::path::Path>,
) -> serde_json::Value {
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "operation": "CREATE", "namespace": namespace, "userInfo": {"username": "someone"},
        "object": {"apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind,
                   "metadata": {"name": "c", "namespace": namespace}, "spec": {"masters": masters, "size": 1}}}});
    let mut curl = std::process::Command::new("curl");
    curl.args([
        "--silent",
        "--show-error",
        "--insecure",
        "--max-time",
        "120",
        "-H",
        "Content-Type: application/json",
    ]);
    if let Some(dir) = cert {
        curl.arg("--cert").arg(dir.join("client.crt")).arg("--key").arg(dir.join("client.key"));
    }
    let url = format!("https://127.0.0.1:{port}/validate/{GROUP}/v1alpha1/{kind}");
    let output = curl.args(["-d", &review.to_string(), &url]).output().expect("curl");
    assert!(output.status.success(), "{}", support::describe_output(&output));
    serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("an AdmissionReview")["response"]
        .clone()
}

#[tokio::test]
async fn with_a_client_ca_the_webhook_answers_only_a_caller_with_its_certificate() {
    // A kind of its own: the configuration is cluster-wide, and the API server has no certificate.
    const GUARDED: &str = "GuardedCluster";
    let Test { client: _, ns, api: _ } = Test::setup("admission-ca").kind(GROUP, GUARDED).build().await;
    let configuration = Configuration(format!("{}-validate", ns.name));
    let certs = scratch_dir("admission-client-ca");
    client_certificate(&certs);
    let port = support::free_port();
    let watches = format!(
        "{}  validate: {{fixtures}}/playbooks/admission_masters.yml\n",
        support::playbook_watch(GROUP, GUARDED, "validate.yml")
    );
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={}", configuration.0))
        .arg(format!("--webhook-client-ca={}", certs.join("ca.crt").display()))
        .start();
    support::api::ApiServer::localhost(port, None).wait_until_up(WAIT);

    let refused = review(port, GUARDED, &ns.name, 3, None);
    assert_eq!(refused["allowed"], false, "{refused}");
    assert!(
        refused["status"]["message"].as_str().unwrap_or_default().contains("--webhook-client-ca"),
        "{refused}"
    );
    let allowed = review(port, GUARDED, &ns.name, 3, Some(&certs));
    assert_eq!(allowed["allowed"], true, "{allowed}\n{}", operator.log());
    let denied = review(port, GUARDED, &ns.name, 2, Some(&certs));
    assert_eq!(denied["allowed"], false, "{denied}");
    assert!(denied["status"]["message"].as_str().unwrap_or_default().contains("must be odd"), "{denied}");
}

#[tokio::test]
async fn a_validation_that_hangs_fails_or_cannot_be_parsed_is_denied_saying_why_and_leaves_nothing_running() {
    // Kinds of their own: the configuration is cluster-wide.
    const HANGS: &str = "HangingCluster";
    const BROKEN: &str = "BrokenCluster";
    let Test { client: _, ns, api: _ } =
        Test::setup("admission-broken").kind(GROUP, HANGS).kind(GROUP, BROKEN).build().await;
    let configuration = Configuration(format!("{}-validate", ns.name));
    let port = support::free_port();
    let watches = format!(
        "{}  validate: {{fixtures}}/playbooks/validate_hangs.yml\n  validateTimeout: 3s\n\
         {}  validate: {{fixtures}}/playbooks/validate_broken.yml\n",
        support::playbook_watch(GROUP, HANGS, "validate.yml"),
        support::playbook_watch(GROUP, BROKEN, "validate.yml"),
    );
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={}", configuration.0))
        .start();
    support::api::ApiServer::localhost(port, None).wait_until_up(WAIT);
    let message = |answer: &serde_json::Value| {
        assert_eq!(answer["allowed"], false, "{answer}\n{}", operator.log());
        answer["status"]["message"].as_str().unwrap_or_default().to_string()
    };

    let hung = message(&review(port, HANGS, &ns.name, 1, None));
    assert_eq!(
        hung,
        "validation timed out after 3s while running task \"wait longer than a validation may\"",
        "{}",
        operator.log()
    );
    let failed = message(&review(port, HANGS, &ns.name, 2, None));
    assert!(failed.contains("no_such_filter"), "{failed}");
    let broken = message(&review(port, BROKEN, &ns.name, 3, None));
    assert!(
        broken.starts_with("validation did not finish: ") && broken.contains("validate_broken.yml"),
        "{broken}"
    );
    assert_eq!(review(port, HANGS, &ns.name, 3, None)["allowed"], true);
    // The hung validation's processes were ended with it: no run is left below the operator.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !runs_below(operator.pid()).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runs_below(operator.pid()), Vec::<u32>::new());
}

/// The processes below `root` that are runs: named `ansible-runner` or `ansible-playbook` (cut to
/// 15 bytes), as a warm run's processes name themselves and a cold run's are.
fn runs_below(root: u32) -> Vec<u32> {
    ansible_operator::runner::process::descendants(root)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| ["ansible-runner", "ansible-playboo"].contains(&name.trim()))
        })
        .collect()
}

#[tokio::test]
async fn forged_reviews_that_are_many_deep_or_huge_get_fast_bounded_answers() {
    // A kind of its own: the configuration is cluster-wide.
    const BOUNDED: &str = "BoundedCluster";
    let Test { client: _, ns, api: _ } = Test::setup("admission-bounds").kind(GROUP, BOUNDED).build().await;
    let configuration = Configuration(format!("{}-validate", ns.name));
    let port = support::free_port();
    let watches = format!(
        "{}  validate: {{fixtures}}/playbooks/validate_slow.yml\n  validateTimeout: 30s\n",
        support::playbook_watch(GROUP, BOUNDED, "validate.yml")
    );
    let _operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={}", configuration.0))
        .arg("--max-concurrent-validations=2")
        .arg("--webhook-client-rate=0")
        .start();
    let api = support::api::ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    let path = format!("/validate/{GROUP}/v1alpha1/{BOUNDED}");
    let object = |spec: serde_json::Value| {
        serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "forged", "operation": "CREATE", "namespace": ns.name, "userInfo": {"username": "anyone"},
            "object": {"apiVersion": format!("{GROUP}/v1alpha1"), "kind": BOUNDED,
                       "metadata": {"name": "c", "namespace": ns.name}, "spec": spec}}})
    };

    // Eight at once into a lane of two: two run, two wait their turn, the others are denied at once.
    let review = object(serde_json::json!({"masters": 3}));
    let answers: Vec<(serde_json::Value, Duration)> = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let started = std::time::Instant::now();
                    let reply = api.request_with_body("POST", &path, None, Some(&review));
                    (reply.body["response"].clone(), started.elapsed())
                })
            })
            .collect();
        sent.into_iter().map(|handle| handle.join().expect("a review")).collect()
    });
    let allowed = answers.iter().filter(|(answer, _)| answer["allowed"] == true).count();
    let busy_at_once = answers
        .iter()
        .filter(|(answer, took)| {
            let message = answer["status"]["message"].as_str().unwrap_or_default();
            message.contains("--max-concurrent-validations") && *took < Duration::from_secs(3)
        })
        .count();
    assert!((2..=4).contains(&allowed), "two run, then the two waiting: {answers:?}");
    assert_eq!(busy_at_once, 4, "the rest are answered at once: {answers:?}");

    // Too deep to decode: denied, with the request's uid.
    let deep = (0..300).fold(serde_json::json!(1), |inner, _| serde_json::json!({"a": inner}));
    let reply = api.request_with_body("POST", &path, None, Some(&object(deep)));
    assert_eq!(reply.body["response"]["uid"], "forged", "{}", reply.body);
    assert_eq!(reply.body["response"]["allowed"], false);
    assert!(
        reply.body["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("could not be decoded")
    );

    // Larger than any review the API server sends: refused before it is read.
    let file = scratch_dir("admission-huge").join("review.json");
    std::fs::write(&file, object(serde_json::json!({"blob": "x".repeat(8 << 20)})).to_string()).unwrap();
    let output = std::process::Command::new("curl")
        .args([
            "--silent",
            "--insecure",
            "--max-time",
            "60",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
        ])
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(api.url(&path))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "413", "{}", support::describe_output(&output));
}
