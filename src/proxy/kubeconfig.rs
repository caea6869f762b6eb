//! The kubeconfig a run's playbooks use: the proxy's address and a credential issued for that run.

/// Renders the kubeconfig (YAML) pointing at the proxy on `port` with bearer `token`. The context
/// namespace is the CR's, so tools that default to it act there, as upstream's does.
pub fn render(port: u16, token: &str, namespace: Option<&str>) -> String {
    let namespace = namespace.unwrap_or("default");
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: proxy-server
  cluster:
    server: http://127.0.0.1:{port}
users:
- name: admin/proxy-server
  user:
    token: {token}
contexts:
- name: {namespace}/proxy-server
  context:
    cluster: proxy-server
    user: admin/proxy-server
    namespace: {namespace}
current-context: {namespace}/proxy-server
"
    )
}

/// Writes the kubeconfig of a run's credential (mode 0600) into its runner dir and points the run at
/// it (`KUBECONFIG`, `K8S_AUTH_KUBECONFIG`). Returns its path.
pub fn install(
    spec: &mut crate::runner::RunSpec,
    port: u16,
    token: &str,
    namespace: Option<&str>,
) -> std::io::Result<std::path::PathBuf> {
    crate::runner::fs::create_private_dir(&spec.dir)?;
    let path = spec.dir.join("kubeconfig");
    crate::runner::fs::write_private(&path, render(port, token, namespace))?;
    let value = serde_json::Value::from(path.display().to_string());
    spec.env_vars.insert("K8S_AUTH_KUBECONFIG".into(), value.clone());
    spec.env_vars.insert("KUBECONFIG".into(), value);
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_honours_the_proxy_port_and_carries_the_run_token() {
        let text = render(18888, "abc123", Some("team-a"));
        let parsed: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(parsed["clusters"][0]["cluster"]["server"], "http://127.0.0.1:18888");
        assert_eq!(parsed["users"][0]["user"]["token"], "abc123");
        assert_eq!(parsed["current-context"], "team-a/proxy-server");
        assert_eq!(parsed["contexts"][0]["context"]["namespace"], "team-a");
    }
}
