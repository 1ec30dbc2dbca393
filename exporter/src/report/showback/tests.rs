use super::*;

#[test]
fn a_gpu_key_names_its_node_with_the_cluster_as_the_tracks_do() {
    let labels: BTreeMap<String, String> = [
        ("cluster", "a"),
        ("node", "gpu-node-1"),
        ("uuid", "GPU-1"),
        ("gpu", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(gpu_of(&labels, None), "gpu-node-1/GPU-1");
    assert_eq!(gpu_of(&labels, Some("cluster")), "a/gpu-node-1/GPU-1");
    assert_eq!(
        gpu_of(&labels, Some("region")),
        "(no cluster)/gpu-node-1/GPU-1"
    );
    // `--by node` groups by the node, the cluster's with `--cluster-label`.
    for (gpu, node) in [
        ("a/gpu-node-1/GPU-1", "a/gpu-node-1"),
        ("gpu-node-1/GPU-1", "gpu-node-1"),
        ("gpu-node-1/gpu 3", "gpu-node-1"),
        ("?/GPU-1", "?"),
        ("GPU-1", NONE),
    ] {
        assert_eq!(node_of(gpu), node, "{gpu}");
    }
}

#[test]
fn by_parses_builtins_and_label_keys() {
    assert_eq!(By::parse("namespace"), Ok(By::Namespace));
    assert_eq!(By::parse(" model "), Ok(By::Model));
    let By::Label { key, name } = By::parse("label:app.kubernetes.io/name").unwrap() else {
        panic!("a label")
    };
    assert_eq!(
        (key.as_str(), name),
        ("app.kubernetes.io/name", "label_app_kubernetes_io_name")
    );
    assert!(matches!(
        By::parse("team"),
        Ok(By::Label {
            name: "label_team",
            ..
        })
    ));
    let e = By::parse("bad key!").unwrap_err();
    assert!(
        e.contains("neither namespace, node, model nor a pod label key"),
        "{e}"
    );
}

/// 120 groups with `--top 50`: the first 50 kept, the other 70 summed in one row; a sum
/// one group does not know is unknown, never a partial sum; 51 groups are not folded.
#[test]
fn the_rest_is_summed_in_one_row() {
    let group = |i: usize| GroupHours {
        group: format!("g{i}"),
        workloads: 1,
        allocated_gpu_hours: 2.0,
        requested_gpu_hours: (i != 100).then_some(1.0),
        time_sliced_effective_compute_gpu_hours: (i == 60).then_some(0.5),
        simulated: i == 77,
        ..GroupHours::default()
    };
    let period = |n: usize| Period {
        groups: (0..n).map(group).collect(),
        ..Period::default()
    };
    let mut s = Showback {
        total: period(120),
        periods: vec![period(51)],
        ..Showback::default()
    };
    fold_rest(&mut s, 50);
    let t = &s.total.groups;
    assert_eq!(t.len(), 51);
    assert_eq!(t[49].group, "g49");
    let rest = &t[50];
    assert_eq!(rest.group, "(the rest: 70 groups)");
    assert_eq!((rest.workloads, rest.allocated_gpu_hours), (70, 140.0));
    assert_eq!(rest.requested_gpu_hours, None, "g100's is unknown");
    assert_eq!(rest.time_sliced_effective_compute_gpu_hours, Some(0.5));
    assert!(rest.simulated, "g77 was simulated");
    assert!(t.iter().take(50).all(|g| !g.simulated));
    assert_eq!(s.periods[0].groups.len(), 51, "one more than --top: kept");
    assert!(s.notes[0].starts_with("120 groups: the 50 most allocated"));
}

/// Requests of 0 to 1e6 GPUs pass; 1e308 and -1 are refused naming the pod.
#[test]
fn absurd_requests_are_refused() {
    assert!(check_requests("a/p", &[(0, 0.0), (1, 8.0), (2, 1e6)]).is_ok());
    let e = check_requests("a/p", &[(0, 1.0), (7, 1e308)]).unwrap_err();
    assert!(
        e.to_string().contains("of pod a/p is 1e308 at step 7"),
        "{e}"
    );
    assert!(check_requests("a/p", &[(0, -1.0)]).is_err());
    // Not a number, or infinite: refused too, never left out in silence.
    for (bad, said) in [
        (f64::NAN, "is NaN"),
        (f64::INFINITY, "is inf"),
        (f64::NEG_INFINITY, "is -inf"),
    ] {
        let e = check_requests("a/p", &[(3, bad)]).unwrap_err();
        assert!(e.to_string().contains(said), "{e}");
    }
}

#[test]
fn csv_fields_are_quoted_and_unknown_is_empty() {
    assert_eq!(field("a,b"), "\"a,b\"");
    assert_eq!(field("say \"x\""), "\"say \"\"x\"\"\"");
    assert_eq!(num(None), "");
    assert_eq!(num(Some(1.5)), "1.500000");
}

/// The CSV says which rows hold simulated GPU-hours: its `simulated` column, on the groups' rows
/// and the unallocated row alike; and which GPU-hours were charged by an assumed MIG share:
/// its `assumed_share_gpu_hours` column.
#[test]
fn csv_rows_say_whether_simulated_or_assumed() {
    let s = Showback {
        by: "namespace".into(),
        total: Period {
            groups: vec![
                GroupHours {
                    group: "demo".into(),
                    simulated: true,
                    ..GroupHours::default()
                },
                GroupHours {
                    group: "ml".into(),
                    assumed_share_gpu_hours: 1.5,
                    ..GroupHours::default()
                },
            ],
            unallocated_simulated: true,
            unallocated_assumed_share_gpu_hours: 0.25,
            allocation_unknown_gpu_hours: 2.0,
            ..Period::default()
        },
        ..Showback::default()
    };
    let mut out = Vec::new();
    write_csv(&mut out, &s, 0, 60.0).unwrap();
    let text = String::from_utf8(out).unwrap();
    let at = |name: &str| CSV_HEADER.split(',').position(|c| c == name).unwrap();
    let (simulated, assumed) = (at("simulated"), at("assumed_share_gpu_hours"));
    let last: Vec<(&str, &str, &str)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), CSV_HEADER.split(',').count(), "{l}");
            (f[3], f[simulated], f[assumed])
        })
        .collect();
    assert_eq!(
        last,
        [
            ("group", "simulated", "assumed_share_gpu_hours"),
            ("demo", "true", "0.000000"),
            ("ml", "false", "1.500000"),
            ("(unallocated)", "true", "0.250000"),
            ("(allocation unknown)", "false", ""),
        ]
    );
}
