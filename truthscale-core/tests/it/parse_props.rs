//! Property tests: no parser panics on any input, every value it produces is finite, and
//! a JSONL line written by `to_line` reads back as the same sample.

use proptest::prelude::*;
use serde_json::{Value, json};
use truthscale_core::model::*;
use truthscale_core::parse::jsonl::to_line;
use truthscale_core::parse::*;

const FORMATS: [Format; 3] = [Format::DcgmiDmon, Format::DcgmExporter, Format::Jsonl];

/// Push every line (ignoring errors), finish, and check every produced value.
fn feed(format: Format, lines: &[String]) {
    let mut p = LineParser::new(format, "p", 1.0, Timestamp(0));
    let mut samples = Vec::new();
    for l in lines {
        if let Ok(Some(s)) = p.push_line(l) {
            samples.push(s);
        }
    }
    samples.extend(p.finish());
    for s in &samples {
        for e in &s.entities {
            for (f, r) in e.readings.iter() {
                if let Reading::Value(v) = r {
                    assert!(v.is_finite(), "{format:?} {}: {v}", f.name());
                }
            }
        }
    }
}

fn feed_all(lines: &[String]) {
    for f in FORMATS {
        feed(f, lines);
    }
}

/// Every parser hands a sample out as soon as it is complete (at the latest when the next
/// begins), and holds back no more than the last for `finish`: it never gathers the input, so memory is bounded by the entities of
/// one sample (the `dmon` parser's also by the rows of one more).
#[test]
fn every_parser_hands_out_each_sample_as_the_next_begins() {
    const SAMPLES: usize = 50;
    let mut dmon = vec![
        "#Entity   GPUTL  TENSO  DRAMA".to_string(),
        "ID".to_string(),
    ];
    let mut exporter = Vec::new();
    let mut jsonl = Vec::new();
    for i in 0..SAMPLES {
        for gpu in 0..2 {
            dmon.push(format!("GPU {gpu}     100    0.5    0.2"));
            exporter.push(format!(
                "DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpu}\",UUID=\"GPU-{gpu}\"}} 100"
            ));
            let mut readings = Readings::default();
            readings.set_value(Field::ReportedUtil, 1.0);
            let e = EntitySample {
                id: EntityId {
                    gpu: Some(gpu),
                    ..EntityId::default()
                },
                readings,
                ..EntitySample::default()
            };
            jsonl.push(to_line(Timestamp(1_000 * i as i64), &e));
        }
    }
    for (format, lines) in [
        (Format::DcgmiDmon, dmon),
        (Format::DcgmExporter, exporter),
        (Format::Jsonl, jsonl),
    ] {
        let mut p = LineParser::new(format, "p", 1.0, Timestamp(0));
        // Entities handed out while lines still come, and held back for `finish`.
        let mut handed = 0;
        for l in &lines {
            if let Some(s) = p.push_line(l).expect("a good line") {
                handed += s.entities.len();
            }
        }
        let held = p.finish().map_or(0, |s| s.entities.len());
        assert_eq!(handed + held, 2 * SAMPLES, "{format:?}");
        assert!(
            held <= 2,
            "{format:?}: held back {held} entities, more than one sample"
        );
    }
}

/// A `dcgmi dmon`-like document: headers, `ID` and units lines, rows whose value count is
/// often right, values that include sentinels and extremes, and some junk.
fn dmon_doc() -> impl Strategy<Value = Vec<String>> {
    let column = prop::sample::select(vec![
        "GPUTL", "MCUTL", "GRACT", "TENSO", "POWER", "TOTEC", "FBUSD", "FBFRE", "FBTTL", "PCITX",
        "ZZZZZ",
    ]);
    let value = prop_oneof![
        Just("N/A".to_owned()),
        any::<f64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        prop::sample::select(vec![
            "4294967295",
            "9223372036854775794",
            "1e308",
            "-1e308",
            "inf",
            "x"
        ])
        .prop_map(str::to_owned),
    ];
    let kind = prop::sample::select(vec!["GPU", "GPU-I", "GPU-CI", "Switch", ""]);
    let row = (kind, 0_u32..4, prop::collection::vec(value, 0..5))
        .prop_map(|(k, id, vals)| format!("{k} {id}    {}", vals.join("   ")));
    let header =
        prop::collection::vec(column, 0..5).prop_map(|c| format!("#Entity   {}", c.join("  ")));
    let unit = prop::sample::select(vec![" W", " C", " mJ", "KB/s", "Mb/s", "", "F", "#"]);
    let units =
        prop::collection::vec(unit, 0..5).prop_map(|u| format!("ID        {}", u.join("     ")));
    let line = prop_oneof![
        1 => header.clone(),
        1 => Just("ID".to_owned()),
        1 => units,
        1 => "[ -~]{0,12}",
        8 => row,
    ];
    (header, prop::collection::vec(line, 0..24)).prop_map(|(h, mut lines)| {
        lines.insert(0, h);
        lines
    })
}

/// Lines built from the pieces of the Prometheus text format.
fn exporter_line() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "dcgm_fb_free",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_PROF_SM_ACTIVE",
        "unknown_metric",
        "",
        "> x",
    ]);
    let label = (
        prop::sample::select(vec![
            "gpu",
            "UUID",
            "GPU_I_ID",
            "GPU_I_PROFILE",
            "pod",
            "namespace",
            "Hostname",
        ]),
        "([0-9]{1,3}|[ -~]{0,5}|\\\\[n\"\\\\t]?)",
    )
        .prop_map(|(k, v)| format!("{k}=\"{v}\""));
    let value = prop_oneof![
        any::<f64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        prop::sample::select(vec![
            "NaN",
            "+Inf",
            "-1e308",
            "1e308",
            "4294967295",
            "",
            "x"
        ])
        .prop_map(str::to_owned),
    ];
    let tail = prop_oneof![3 => Just(String::new()), 1 => "[ -~]{0,4}"];
    (
        name,
        prop::collection::vec(label, 0..4),
        prop::bool::weighted(0.8),
        value,
        tail,
    )
        .prop_map(|(n, labels, close, v, tail)| {
            format!(
                "{n}{{{}{} {v}{tail}",
                labels.join(","),
                if close { "}" } else { "" }
            )
        })
}

/// JSON objects mixing known keys with values of every type.
fn jsonl_line() -> impl Strategy<Value = String> {
    let mut keys: Vec<&'static str> = Field::ALL.iter().map(|f| f.name()).collect();
    keys.extend([
        "taken",
        "node",
        "gpu",
        "model",
        "uuid",
        "mig_gpu_instance",
        "mig_compute_instance",
        "mig_profile",
        "pod",
        "namespace",
        "throttles",
        "serving",
        "unavailable",
        "source",
        "truth_phase",
        "truth_workload",
        "truth_effective_compute",
        "energy_read_at",
        "sm_clock_point",
        "zzz",
    ]);
    let value = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        6 => any::<f64>().prop_map(|v| json!(v)),
        1 => Just(json!("2024-01-01T00:00:00Z")),
        1 => Just(json!(["power", "thermal"])),
        1 => Just(json!({"gpu_util": "x", "engine": "vllm", "batch_size": 4})),
        1 => "[ -~]{0,8}".prop_map(Value::from),
    ];
    (
        prop::collection::vec((prop::sample::select(keys), value), 0..8),
        any::<bool>(),
    )
        .prop_map(|(kv, taken)| {
            let mut m: serde_json::Map<String, Value> =
                kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if taken {
                m.insert("taken".into(), json!("2024-01-01T00:00:00.5+02:00"));
            }
            Value::Object(m).to_string()
        })
}

/// A value that `serde_json` (without its `float_roundtrip` feature) reads back exactly:
/// at most 15 significant digits.
fn short_decimal() -> impl Strategy<Value = f64> {
    (-999_999_999_999_999_i64..=999_999_999_999_999, 0_i32..=15)
        .prop_map(|(m, k)| m as f64 / 10f64.powi(k))
}

fn reading() -> impl Strategy<Value = Reading> {
    prop_oneof![
        Just(Reading::Blank),
        Just(Reading::Unsupported),
        short_decimal().prop_map(Reading::Value)
    ]
}

fn entity_sample() -> impl Strategy<Value = EntitySample> {
    let text = "\\PC{1,12}";
    let id = (
        prop::option::of(any::<u32>()),
        prop::option::of(text),
        prop::option::of(text),
        prop::option::of(text),
        prop::option::of(text),
        prop::option::of((
            any::<u32>(),
            prop::option::of(any::<u32>()),
            prop::option::of(text),
        )),
        prop::option::of((text, prop::option::of(text), prop::option::of(text))),
        prop::option::of(text),
    )
        .prop_map(
            |(gpu, uuid, model, pci_bus_id, driver_version, mig, pod, node)| EntityId {
                gpu,
                uuid,
                model,
                pci_bus_id,
                driver_version,
                mig: mig.map(|(gpu_instance, compute_instance, profile)| MigId {
                    uuid: None,
                    gpu_instance,
                    compute_instance,
                    profile,
                }),
                pod: pod.map(|(pod, namespace, container)| PodRef {
                    pod,
                    namespace,
                    container,
                }),
                node,
                // Not in a trace.
                minor: None,
            },
        );
    let readings = prop::collection::vec(reading(), Field::COUNT).prop_map(|rs| {
        let mut r = Readings::default();
        for (&f, v) in Field::ALL.iter().zip(rs) {
            r.set(f, v);
        }
        r
    });
    let throttles = prop::option::of(prop::collection::vec(any::<bool>(), 5)).prop_map(|b| {
        b.map(|b| Throttles {
            sw_power_cap: b[0],
            hw_slowdown: b[1],
            thermal: b[2],
            sync_boost: b[3],
            power: b[4],
        })
    });
    // The KV-cache share an engine gives, 0 to 1 (outside it the parser refuses it).
    let kv = (0_u32..=1_000_000).prop_map(|m| f64::from(m) / 1e6);
    let serving = prop::option::of((prop::option::of(text), prop::option::of(kv))).prop_map(|s| {
        s.map(|(engine, kv)| ServingSnapshot {
            engine,
            kv_cache_utilization: kv,
            ..ServingSnapshot::default()
        })
    });
    let truth = (
        prop::option::of(prop::sample::select(Phase::ALL.to_vec())),
        prop::option::of(prop::sample::select(Workload::ALL.to_vec())),
        // The truth a trace may carry: a fraction of the peak, 0 to 1.5.
        prop::option::of((0_u32..=1_500_000).prop_map(|m| f64::from(m) / 1e6)),
        any::<bool>(),
        any::<bool>(),
    );
    (id, readings, throttles, serving, truth).prop_map(
        |(
            id,
            readings,
            throttles,
            serving,
            (truth_phase, truth_workload, truth_effective_compute, simulated, point),
        )| {
            EntitySample {
                allocation: None,
                id,
                readings,
                throttles,
                serving,
                truth_phase,
                truth_workload,
                truth_effective_compute,
                simulated,
                sm_clock_is_point: point,
                counters_held: false,
                nvlink_wait_links: 0,
                energy_read_at: None,
                // Process lists and holders' pressure are not part of the trace format.
                processes: Vec::new(),
                job: None,
                holder_pressure: Vec::new(),
            }
        },
    )
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*(\n\\PC*){0,8}") {
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        feed_all(&lines);
    }

    #[test]
    fn arbitrary_lines_never_panic(lines in prop::collection::vec(any::<String>(), 0..12)) {
        feed_all(&lines);
    }

    #[test]
    fn dmon_like_lines(lines in dmon_doc()) {
        feed(Format::DcgmiDmon, &lines);
    }

    #[test]
    fn exporter_like_lines(lines in prop::collection::vec(exporter_line(), 0..16)) {
        feed(Format::DcgmExporter, &lines);
    }

    #[test]
    fn jsonl_like_lines(lines in prop::collection::vec(jsonl_line(), 0..8)) {
        feed(Format::Jsonl, &lines);
    }

    #[test]
    fn jsonl_round_trip(
        ms in -62_167_219_200_000_i64..=253_402_300_799_999,
        e in entity_sample(),
    ) {
        let line = to_line(Timestamp(ms), &e);
        let mut p = JsonlParser::new("t");
        let got = p.push_line(&line).map_err(|err| TestCaseError::fail(format!("{err}: {line}")))?;
        prop_assert_eq!(got, Some(Sample { taken: Timestamp(ms), entities: vec![e] }), "{}", line);
    }
}
