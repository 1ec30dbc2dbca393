//! The kubelet client's generated code is checked in (`proto/kubelet/podresources/v1/
//! generated.rs`), so that a build runs no code generator; this test regenerates it from the
//! vendored proto, as the build once did, and compares. `UPDATE_GENERATED=1` rewrites it.

#[test]
fn the_checked_in_podresources_code_is_what_the_proto_generates() {
    // Cargo runs a crate's tests in its own folder: the paths are the crate's.
    let proto = "proto/kubelet/podresources/v1/api.proto";
    let checked_in = "proto/kubelet/podresources/v1/generated.rs";
    let out = std::env::temp_dir().join(format!("truthscale-podresources-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let fds = protox::compile([proto], ["proto/kubelet"]).unwrap();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .out_dir(&out)
        .compile_fds(fds)
        .unwrap();
    let generated = std::fs::read_to_string(out.join("v1.rs")).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(checked_in, &generated).unwrap();
    }
    let kept = std::fs::read_to_string(checked_in).unwrap();
    assert!(
        kept == generated,
        "{checked_in} is not what {proto} generates: run UPDATE_GENERATED=1 cargo test -p truthscale-exporter --lib generated_check"
    );
}
