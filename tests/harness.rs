//! Proves the test harness against the real API server: CRDs, the status subresource and watches.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::setup::Test;

#[tokio::test]
async fn status_written_through_the_subresource_is_seen_by_a_watch() {
    let Test { client, ns, api: _ } =
        Test::setup("harness").kind("harness.test.example.com", "Widget").build().await;

    let gvk = GroupVersionKind::gvk("harness.test.example.com", "v1alpha1", "Widget");
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource);
    let mut stream = watcher(api.clone(), watcher::Config::default()).applied_objects().boxed();

    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "harness.test.example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "one"},
        "spec": {"size": 3}
    }))
    .unwrap();
    api.create(&PostParams::default(), &widget).await.expect("create CR");
    let status = json!({"status": {"phase": "Ready", "observed": 3}});
    api.patch_status("one", &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch status");

    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = stream.next().await {
            let object = event.expect("watch event");
            if object.data["status"]["phase"] == "Ready" {
                return object;
            }
        }
        panic!("watch ended before the status was seen");
    })
    .await
    .expect("the watch shows the status within 20s");

    assert_eq!(seen.data["spec"]["size"], 3, "spec as created");
    assert_eq!(seen.data["status"]["observed"], 3, "status as written");
    let generation = seen.metadata.generation.expect("generation");
    assert_eq!(generation, 1, "a status write does not bump the generation");
}
