//! Generates the kubelet PodResources client (and the server the tests fake the kubelet
//! with) from the vendored `proto/kubelet/podresources/v1/api.proto`, with protox: no
//! `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/kubelet/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto/kubelet"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
