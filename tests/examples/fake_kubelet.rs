//! A fake kubelet for benchmarks: serves the PodResources API (the vendored proto) on a unix
//! socket with the allocations of a JSON file (`List`, and `Get` of one of its pods), until it
//! is stopped.
//!
//! `cargo run -p truthscale-e2e --example fake_kubelet -- SOCKET ALLOCATIONS.json`, where the
//! file is a list of `{"pod", "namespace", "container", "resource", "devices": [ids]}`.

use serde_json::Value;
use truthscale_exporter::attribution::kubelet::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use truthscale_exporter::attribution::kubelet::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};

struct Fake(ListPodResourcesResponse);

#[tonic::async_trait]
impl PodResourcesLister for Fake {
    async fn list(
        &self,
        _: tonic::Request<ListPodResourcesRequest>,
    ) -> Result<tonic::Response<ListPodResourcesResponse>, tonic::Status> {
        Ok(tonic::Response::new(self.0.clone()))
    }
    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<AllocatableResourcesRequest>,
    ) -> Result<tonic::Response<AllocatableResourcesResponse>, tonic::Status> {
        Ok(tonic::Response::new(AllocatableResourcesResponse::default()))
    }
    async fn get(
        &self,
        request: tonic::Request<GetPodResourcesRequest>,
    ) -> Result<tonic::Response<GetPodResourcesResponse>, tonic::Status> {
        let r = request.into_inner();
        self.0
            .pod_resources
            .iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .map(|p| {
                tonic::Response::new(GetPodResourcesResponse {
                    pod_resources: Some(p.clone()),
                })
            })
            .ok_or_else(|| {
                tonic::Status::unknown(format!(
                    "pod {} in namespace {} not found",
                    r.pod_name, r.pod_namespace
                ))
            })
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(file)) = (args.get(1), args.get(2)) else {
        return Err("usage: fake_kubelet SOCKET ALLOCATIONS.json".into());
    };
    let list: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    let answer = ListPodResourcesResponse {
        pod_resources: list
            .iter()
            .map(|p| PodResources {
                name: text(p, "pod"),
                namespace: text(p, "namespace"),
                containers: vec![ContainerResources {
                    name: text(p, "container"),
                    devices: vec![ContainerDevices {
                        resource_name: text(p, "resource"),
                        device_ids: p["devices"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|d| d.as_str().map(str::to_string))
                            .collect(),
                        topology: None,
                    }],
                    ..Default::default()
                }],
            })
            .collect(),
    };
    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket)?;
    tonic::transport::Server::builder()
        .add_service(PodResourcesListerServer::new(Fake(answer)))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await?;
    Ok(())
}
