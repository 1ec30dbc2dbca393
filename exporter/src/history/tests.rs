use super::*;
use truthscale_core::model::Field;

#[test]
fn a_pods_series_takes_the_selectors_namespace_pod_and_cluster_matchers_only() {
    let m = r#"job="dcgm",namespace="prod",pod=~"llm-\\..*",cluster!="b",node="n1""#;
    assert_eq!(
        pod_selector(m, Some("cluster"), r#"resource="nvidia_com_gpu""#),
        r#"{resource="nvidia_com_gpu",namespace="prod",pod=~"llm-\\..*",cluster!="b"}"#
    );
    // Without --cluster-label, a `cluster` matcher is one on GPU series only.
    assert_eq!(
        pod_selector(m, None, ""),
        r#"{namespace="prod",pod=~"llm-\\..*"}"#
    );
    assert_eq!(pod_selector(r#"job="dcgm""#, None, ""), "");
    assert_eq!(pod_selector("", None, r#"a="b""#), r#"{a="b"}"#);
    // A value's quote and backslash are written back as PromQL reads them.
    assert_eq!(
        pod_selector(r#"namespace="a\"b\\c""#, None, ""),
        r#"{namespace="a\"b\\c"}"#
    );
}

/// The families read back (those OWN_METRICS listed before the catalog held them), each
/// with its reading and the factor from the exported unit to the reading's.
const OWN_READINGS: &[(&str, Field, f64)] = &[
    (
        catalog::GPU_REPORTED_UTILIZATION.name,
        Field::ReportedUtil,
        1.0,
    ),
    (catalog::GPU_SM_ACTIVE.name, Field::SmActive, 1.0),
    (catalog::GPU_SM_OCCUPANCY.name, Field::SmOccupancy, 1.0),
    (catalog::GPU_TENSOR_ACTIVE.name, Field::TensorActive, 1.0),
    (catalog::GPU_DRAM_ACTIVE.name, Field::DramActive, 1.0),
    (catalog::GPU_MEMORY_USED.name, Field::MemUsedBytes, 1.0),
    (catalog::GPU_MEMORY_TOTAL.name, Field::MemTotalBytes, 1.0),
    (catalog::GPU_POWER.name, Field::PowerWatts, 1.0),
    (catalog::GPU_POWER_LIMIT.name, Field::PowerLimitWatts, 1.0),
    (catalog::GPU_SM_CLOCK.name, Field::SmClockMhz, 1e-6),
    // The health levels, so that history decides health by the same rules.
    (catalog::GPU_XID_LAST.name, Field::XidLast, 1.0),
    (
        catalog::GPU_XID_WINDOW_ERRORS.name,
        Field::XidWindowErrors,
        1.0,
    ),
    (
        catalog::GPU_XID_WINDOW_FATAL.name,
        Field::XidWindowFatal,
        1.0,
    ),
    (
        catalog::GPU_ROW_REMAP_PENDING.name,
        Field::RowRemapPending,
        1.0,
    ),
    (
        catalog::GPU_ROW_REMAP_FAILED.name,
        Field::RowRemapFailed,
        1.0,
    ),
    (
        catalog::GPU_ROW_REMAP_UNCORRECTABLE.name,
        Field::RowRemapUncorrectable,
        1.0,
    ),
    (
        catalog::GPU_RECOVERY_ACTION.name,
        Field::RecoveryAction,
        1.0,
    ),
    (
        catalog::GPU_MEMORY_UNREPAIRABLE.name,
        Field::MemoryUnrepairable,
        1.0,
    ),
    (
        catalog::GPU_FABRIC_HEALTH_SUMMARY.name,
        Field::FabricHealthSummary,
        1.0,
    ),
    // What a starved window's cause is decided from, so node mode's history
    // decides it by the same rules.
    (
        catalog::GPU_PCIE_RECEIVE.name,
        Field::PcieRxBytesPerSec,
        1.0,
    ),
    (
        catalog::GPU_PCIE_TRANSMIT.name,
        Field::PcieTxBytesPerSec,
        1.0,
    ),
    (
        catalog::GPU_PCIE_LINK_GENERATION.name,
        Field::PcieLinkGen,
        1.0,
    ),
    (catalog::GPU_PCIE_LINK_WIDTH.name, Field::PcieLinkWidth, 1.0),
    (
        catalog::GPU_NVLINK_RECEIVE.name,
        Field::NvlinkRxBytesPerSec,
        1.0,
    ),
    (
        catalog::GPU_NVLINK_TRANSMIT.name,
        Field::NvlinkTxBytesPerSec,
        1.0,
    ),
    (
        catalog::GPU_NVLINK_TRANSMIT_WAIT.name,
        Field::NvlinkTxWaitPerSec,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_CPU_THROTTLED.name,
        Field::HolderCpuThrottledRatio,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_CPU_LIMIT.name,
        Field::HolderCpuLimitCores,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_CPU_WAITING.name,
        Field::HolderCpuWaitingRatio,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_IO_WAITING.name,
        Field::HolderIoWaitingRatio,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_IO_STALLED.name,
        Field::HolderIoStalledRatio,
        1.0,
    ),
    (
        catalog::GPU_HOLDER_MEMORY_STALLED.name,
        Field::HolderMemoryStalledRatio,
        1.0,
    ),
];

#[test]
fn own_metrics_are_the_catalogs_readings() {
    let own: Vec<(&str, Field, f64)> = own_names()
        .map(|n| {
            let r = own_metric(n).unwrap();
            (n, r.field, r.read_back(1.0))
        })
        .collect();
    assert_eq!(own, OWN_READINGS);
    for id in NOT_READ_BACK {
        assert!(id.desc().raw.is_some(), "{}", id.desc().name);
    }
    assert!(is_dcgm("DCGM_FI_DEV_FB_FREE") && !is_dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"));
}

#[test]
fn discovery_asks_by_prefixes_that_match_every_name_read() {
    // Discovery asks by prefixes, so its URL stays short: every name read matches them,
    // and the selector is well under a proxy's 8 KB request line.
    let selector = gpu_series("namespace=\"prod\"");
    assert!(selector.len() < 400, "{} bytes: {selector}", selector.len());
    let alternatives: Vec<&str> = selector
        .split('"')
        .nth(1)
        .expect("the name regex")
        .split('|')
        .collect();
    let prefixes: Vec<&str> = alternatives
        .iter()
        .map(|a| a.strip_suffix(".+").expect("a prefix"))
        .collect();
    let matched = |n: &str| prefixes.iter().any(|p| n.starts_with(p));
    for (n, _) in dcgm_text::mapped_metrics() {
        assert!(matched(n) && matched(&n.to_ascii_uppercase()), "{n}");
    }
    for n in own_names() {
        assert!(matched(n), "{n}");
    }
}

/// `--bearer-token-file` is read bounded: `/dev/zero`, a FIFO, a directory and a file
/// over 64 KiB are refused at once, naming the flag and the file.
#[test]
fn bearer_token_file_is_read_bounded() {
    use crate::bounds::{MAX_TOKEN_FILE, hostile};
    let dir = std::env::temp_dir().join(format!("ts-history-token-{}", std::process::id()));
    let t = std::time::Instant::now();
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        p: PrometheusArgs,
    }
    for (path, why) in hostile::files(&dir, MAX_TOKEN_FILE) {
        let args = <Cli as clap::Parser>::try_parse_from([
            "t".as_ref(),
            "--prometheus".as_ref(),
            "http://x".as_ref(),
            "--bearer-token-file".as_ref(),
            path.as_os_str(),
        ])
        .unwrap()
        .p;
        let err = authorization(&args, &[]).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            format!("cannot read --bearer-token-file {}: {why}", path.display())
        );
    }
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn basic_auth_never_needs_printing() {
    let args = PrometheusArgs {
        prometheus: Some("http://x".into()),
        since: None,
        step: None,
        selector: None,
        bearer_token_file: None,
        basic_auth: Some("user:pa:ss".into()),
        prometheus_timeout: None,
        deadline: None,
        max_requests_per_query: None,
        until: None,
        ca_file: None,
        max_queries_in_flight: None,
        prometheus_retries: None,
        cluster_label: None,
        scrape_interval: None,
        compression: None,
        waiting_notice: None,
        remote_read: None,
    };
    assert_eq!(
        authorization(&args, &[]).unwrap().as_deref(),
        Some("Basic dXNlcjpwYTpzcw==")
    );
}

/// A pod series' values by step: a value that is no number kept as NaN, for its reader to
/// refuse (a GPU request "n/a" is refused, never dropped in silence); a point outside the
/// times asked for (`[first, last]` of one chunk of the range) left out and counted.
#[test]
fn pod_series_keep_what_is_no_number_and_count_points_outside() {
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{"pod":"a"},"values":[[0,"1"],[60,"n/a"],[120,"0.5"],[180,"2"]]}]}}"#;
    let (m, _) = api::decode::<api::Matrix>("q", 200, body).unwrap();
    let range = Range {
        start: 60_000,
        end: 240_000,
        step: 60_000,
    };
    let mut into = Vec::new();
    let values = m.values_of(&m.result[0]);
    let outside = read::by_step(range, (60_000, 120_000), values, &mut into);
    // 0 s is before the range, 180 s after the chunk asked for.
    assert_eq!(outside, 2);
    assert_eq!(into.len(), 2);
    assert!(into[0].0 == 0 && into[0].1.is_nan(), "{into:?}");
    assert_eq!(into[1], (1, 0.5));
}

/// The warning on points outside the times asked for names how many and why; none without.
#[test]
fn points_outside_are_warned_of() {
    assert_eq!(feed::outside_warning(0), None);
    assert_eq!(
        feed::outside_warning(3).as_deref(),
        Some(
            "3 points of the answers lay outside the time range asked for and were left out, not read (Prometheus answers none there: a compatible server or a proxy in front of it did)"
        )
    );
}

/// Every DCGM family found and not read is named, whatever its prefix: `DCGM_EXP_*` and
/// dcgm-exporter 1.x's `dcgm_*` as `DCGM_FI_*` (only the latter were), and no family read.
#[test]
fn dcgm_families_found_and_not_read_are_named() {
    let found: Vec<String> = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
        "dcgm_mem_copy_utilization",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        unread_dcgm(&found).summary().as_deref(),
        Some(
            "not read: dcgm_exp_clock_events_count, dcgm_fi_dev_vgpu_license_status, dcgm_mem_copy_utilization"
        )
    );
}
