//! A fake kubelet for benchmarks: serves the PodResources API (the vendored proto) on a unix
//! socket with the allocations of a JSON file (`List`, and `Get` of one of its pods), until it
//! is stopped. The server is `truthscale_e2e::kubelet`, the one the tests use.
//!
//! `cargo run -p truthscale-e2e --example fake_kubelet -- SOCKET ALLOCATIONS.json`, where the
//! file is a list of `{"pod", "namespace", "container", "resource", "devices": [ids]}`.

use serde_json::Value;
use truthscale_e2e::kubelet::{Kubelet, State, pod};
use truthscale_exporter::attribution::kubelet::proto::ListPodResourcesResponse;

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(file)) = (args.get(1), args.get(2)) else {
        return Err("usage: fake_kubelet SOCKET ALLOCATIONS.json".into());
    };
    let list: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    let state = State::default();
    *state.answer.lock().map_err(|_| "poisoned")? = ListPodResourcesResponse {
        pod_resources: list
            .iter()
            .map(|p| {
                let ids: Vec<&str> = p["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                pod(
                    text(p, "pod"),
                    text(p, "namespace"),
                    text(p, "container"),
                    text(p, "resource"),
                    &ids,
                )
            })
            .collect(),
    };
    let _kubelet = Kubelet::start(std::path::Path::new(socket), state);
    // Serve until stopped (the benchmark scripts stop it by its PID).
    loop {
        std::thread::park();
    }
}
