//! The builder for one test's cluster side: a client, a namespace of its own, the CRDs it needs and
//! the API of the kind it creates CRs of.

use kube::Client;
use kube::api::{Api, DynamicObject};

use super::{TestNamespace, client, cr_api, crd, install_crd, install_run_records_crd, install_sample_crds};

/// One test's cluster side. Its namespace is deleted when it is dropped; tests usually take it
/// apart (`let Test { client, ns, api } = ...`), so drop order follows their own bindings.
pub struct Test {
    /// A client for the test cluster.
    pub client: Client,
    /// The test's own namespace.
    pub ns: TestNamespace,
    /// The API of the test's kind in `ns`.
    pub api: Api<DynamicObject>,
}

/// What a test needs from the cluster, built up by its methods and made by `build`.
#[must_use]
pub struct TestSetup {
    prefix: String,
    kind: Option<(String, String)>,
    open_kinds: Vec<(String, String)>,
    run_records: bool,
    samples: bool,
}

impl Test {
    /// A setup whose namespace is named after `prefix` plus a random suffix.
    pub fn setup(prefix: &str) -> TestSetup {
        TestSetup {
            prefix: prefix.into(),
            kind: None,
            open_kinds: Vec::new(),
            run_records: false,
            samples: false,
        }
    }
}

impl TestSetup {
    /// Installs an open-schema CRD for `<group>/v1alpha1 <kind>` (see `support::crd`); the first
    /// kind named is the one `api` serves.
    pub fn kind(mut self, group: &str, kind: &str) -> Self {
        self.kind.get_or_insert_with(|| (group.into(), kind.into()));
        self.open_kinds.push((group.into(), kind.into()));
        self
    }

    /// Installs the sample operator's CRDs (`deploy/crds/`); `api` serves their `group`/`kind`.
    pub fn sample(mut self, group: &str, kind: &str) -> Self {
        self.samples = true;
        self.kind.get_or_insert_with(|| (group.into(), kind.into()));
        self
    }

    /// Installs deploy/'s `AnsibleRun` CRD too, where the run history is kept.
    pub fn run_records(mut self) -> Self {
        self.run_records = true;
        self
    }

    /// Makes the client and the namespace, installs the CRDs and waits until they are served.
    pub async fn build(self) -> Test {
        let (group, kind) = self.kind.expect("a test setup names the kind its CRs are of");
        let client = client().await;
        let ns = TestNamespace::new(&client, &self.prefix).await;
        for (group, kind) in &self.open_kinds {
            install_crd(&client, &crd(group, kind, true)).await;
        }
        if self.run_records {
            install_run_records_crd(&client).await;
        }
        if self.samples {
            install_sample_crds(&client).await;
        }
        let api = cr_api(&client, &group, &kind, &ns.name);
        Test { client, ns, api }
    }
}
