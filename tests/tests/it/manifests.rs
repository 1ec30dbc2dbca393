//! Reading the manifests under `docker/`: the helpers `docker`, `node_manifests` and
//! `autoscaling` share.

use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use truthscale_e2e::workspace;

/// A file of the repository, as text.
pub(crate) fn read(rel: &str) -> String {
    let path = workspace().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A single-document YAML file of the repository.
pub(crate) fn yaml(rel: &str) -> Value {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: not YAML: {e}"))
}

pub(crate) fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {v:?}"))
}

pub(crate) fn seq_of<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what}: expected a list, got {v:?}"))
}

pub(crate) fn strings(v: &Value, what: &str) -> Vec<String> {
    seq_of(v, what)
        .iter()
        .map(|s| str_of(s, what).to_owned())
        .collect()
}

/// The container named `name` of a workload (a Deployment, a DaemonSet, or a patch of one).
pub(crate) fn container<'a>(workload: &'a Value, name: &str, file: &str) -> &'a Value {
    seq_of(
        &workload["spec"]["template"]["spec"]["containers"],
        &format!("{file}: containers"),
    )
    .iter()
    .find(|c| c["name"].as_str() == Some(name))
    .unwrap_or_else(|| panic!("{file}: no container named {name}"))
}

/// The test values the kubelet would put into the Downward API variables.
pub(crate) fn downward_api(field_path: &str) -> &'static str {
    match field_path {
        "metadata.name" => "llm-inference-5f7c9d8b6-x2x7q",
        "metadata.namespace" => "inference-e2e",
        "spec.nodeName" => "gpu-node-7",
        "metadata.uid" => "0b6a2f4e-7c1d-4e8a-9f3b-5d2c8e1a7b64",
        "status.hostIP" => "127.0.0.1",
        other => panic!("no test value for the Downward API field {other}"),
    }
}

/// A container's environment as the kubelet would set it: literal values as they are, field
/// references from [`downward_api`].
pub(crate) fn container_env(c: &Value, file: &str) -> BTreeMap<String, String> {
    let Some(env) = c.get("env") else {
        return BTreeMap::new();
    };
    seq_of(env, &format!("{file}: env"))
        .iter()
        .map(|e| {
            let name = str_of(&e["name"], &format!("{file}: env name")).to_owned();
            let value = match (&e["value"], &e["valueFrom"]["fieldRef"]["fieldPath"]) {
                (Value::String(v), Value::Null) => v.clone(),
                (Value::Null, Value::String(path)) => downward_api(path).to_owned(),
                other => panic!("{file}: env {name}: unsupported source {other:?}"),
            };
            (name, value)
        })
        .collect()
}

/// Every YAML file under `docker/kubernetes/` and `docker/kubernetes-demo/` (each holds one
/// document), by its path from the workspace, in path order.
pub(crate) fn kubernetes_manifests() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    let mut stack = vec![
        workspace().join("docker/kubernetes"),
        workspace().join("docker/kubernetes-demo"),
    ];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                let rel = path
                    .strip_prefix(workspace())
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                found.push((rel.clone(), yaml(&rel)));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The containers of a workload or a patch of one (none for another kind).
pub(crate) fn containers_of(doc: &Value) -> &[Value] {
    doc["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .map_or(&[], Vec::as_slice)
}
