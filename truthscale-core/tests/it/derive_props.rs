//! Property tests: no input makes derivation panic or emit a non-finite value.

use proptest::prelude::*;
use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::exposition::{self, ExporterStatus, GpuEntry};
use truthscale_core::model::{
    EntityId, EntitySample, Field, MigId, Reading, Readings, Sample, ServingSnapshot, SourceKind,
    Throttles, Timestamp,
};
use truthscale_core::phase::PhaseConfig;
use truthscale_core::tracker::Deriver;
use truthscale_core::verdict::VerdictConfig;

fn any_reading() -> impl Strategy<Value = Reading> {
    prop_oneof![
        Just(Reading::Blank),
        Just(Reading::Unsupported),
        any::<f64>().prop_map(Reading::Value),
        (-0.5f64..2.0).prop_map(Reading::Value),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(9_223_372_036_854_775_794.0),
            Just(4_294_967_295.0),
            Just(0.0),
            Just(1.0),
        ]
        .prop_map(Reading::Value),
    ]
}

fn any_entity() -> impl Strategy<Value = EntitySample> {
    (
        proptest::collection::vec(any_reading(), Field::COUNT),
        0u32..3,
        proptest::option::of(0u32..3),
        prop_oneof![
            Just(None),
            Just(Some("NVIDIA H100 80GB HBM3".to_string())),
            Just(Some("Tesla T4".to_string())),
            Just(Some("Mystery GPU".to_string())),
        ],
        any::<bool>(),
        proptest::option::of(proptest::collection::vec(any_rate(), 4)),
    )
        .prop_map(|(rs, gpu, gi, model, capped, serving)| {
            let mut readings = Readings::default();
            for (f, r) in Field::ALL.iter().zip(rs) {
                readings.set(*f, r);
            }
            EntitySample {
                id: EntityId {
                    gpu: Some(gpu),
                    model,
                    mig: gi.map(|g| MigId {
                        gpu_instance: g,
                        ..MigId::default()
                    }),
                    ..EntityId::default()
                },
                readings,
                throttles: Some(Throttles {
                    sw_power_cap: capped,
                    ..Throttles::default()
                }),
                serving: serving.map(|v| ServingSnapshot {
                    engine: Some("vllm".into()),
                    prompt_tokens_per_sec: v[0],
                    output_tokens_per_sec: v[1],
                    queue_seconds: v[2],
                    batch_size: v[3],
                    ..ServingSnapshot::default()
                }),
                ..EntitySample::default()
            }
        })
}

/// An engine's rate: absent, or any finite value, the extremes made likely (an engine's
/// counters are parsed to finite values, but their rates can be anything finite).
fn any_rate() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        Just(None),
        (0.0f64..1e5).prop_map(Some),
        prop_oneof![
            Just(f64::MAX),
            Just(1e308),
            Just(1e-307),
            Just(f64::MIN_POSITIVE)
        ]
        .prop_map(Some),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(Some),
    ]
}

/// Every value the catalog derives for `gpus`, before the encoders' last check for finite
/// values, is finite.
fn exposition_is_finite(gpus: &[GpuEntry]) -> Result<(), TestCaseError> {
    let mut bad = None;
    exposition::for_each_derived_value(gpus, &ExporterStatus::default(), |m, v| {
        if !v.is_finite() && bad.is_none() {
            bad = Some((m.name, v));
        }
    });
    prop_assert!(bad.is_none(), "{bad:?}");
    Ok(())
}

fn finite(x: Option<f64>) -> bool {
    x.is_none_or(f64::is_finite)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn derive_never_panics_or_emits_nan(
        steps in proptest::collection::vec((-2_000i64..5_000, proptest::collection::vec(any_entity(), 0..4)), 1..30)
    ) {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), None), true);
        let mut t = 0i64;
        for (delta, entities) in steps {
            t += delta;
            let s = Sample { taken: Timestamp(t), entities };
            a.push(&s);
            let gpus = crate::gpu_entries(d.observe(&s).windows, SourceKind::Replay);
            exposition_is_finite(&gpus)?;
            for GpuEntry { window: w, .. } in &gpus {
                let m = &w.metrics;
                for v in [
                    m.reported_utilization, m.effective_compute, m.effective_compute_upper_bound,
                    m.busiest_pipe, m.kappa, m.roofline_saturation, m.roofline_saturation_spec,
                    m.roofline_saturation_practical, m.inflation_gap_points, m.inflation_ratio,
                    m.spatial_inflation, m.roofline_gap, m.rho, m.power_proxy,
                    m.memory_used_fraction, m.power_watts.map(|p| p.value),
                ] {
                    prop_assert!(finite(v), "{:?}", m);
                }
                for x in [m.effective_compute, m.roofline_saturation, m.power_proxy] {
                    prop_assert!(x.is_none_or(|x| (0.0..=1.0).contains(&x)));
                }
                let tot = w.totals;
                prop_assert!(tot.busy_seconds.is_finite() && tot.energy_joules.is_finite());
                prop_assert!(tot.observed_seconds >= 0.0);
            }
        }
        for e in a.report().entities {
            prop_assert!(finite(e.reported_utilization.map(|m| m.mean)));
            prop_assert!(finite(e.effective_compute.map(|m| m.mean)));
            prop_assert!(finite(e.effective_compute.map(|m| m.p95)));
            prop_assert!(finite(e.inflation_gap_points.map(|m| m.mean)));
            prop_assert!(finite(e.roofline_saturation.map(|m| m.mean)));
            // Unclassified is no fractions at all, never all zeros.
            if let Some(sum) = e.regime_fraction.map(|f| f.sum()) {
                prop_assert!((sum - 1.0).abs() < 1e-9, "{sum}");
            }
            prop_assert!(e.regime_fraction.is_some() == e.regime_method.is_some());
        }
    }

    /// No configuration value can make derivation panic or emit NaN: any threshold at all,
    /// NaN, infinite, negative or inverted, whether or not validation would accept it. And
    /// validation accepts only finite values.
    #[test]
    fn no_configuration_panics(
        vals in proptest::collection::vec(any_threshold(), 56),
        switch_after in any::<u32>(),
        steps in proptest::collection::vec((1i64..3_000, proptest::collection::vec(any_entity(), 1..3)), 1..20),
    ) {
        let mut v = vals.into_iter();
        let mut next = || v.next().unwrap_or(0.5);
        let phase = PhaseConfig {
            idle_enter_util: next(), idle_enter_sm: next(), idle_exit_util: next(),
            stalled_enter_util: next(), stalled_enter_tensor: next(), stalled_enter_dram: next(),
            stalled_enter_pipe: next(), stalled_exit_util: next(), stalled_exit_tensor: next(),
            stalled_exit_dram: next(), compute_bound_enter_rho: next(),
            compute_bound_enter_tensor: next(), compute_bound_exit_rho: next(),
            compute_bound_exit_tensor: next(), memory_bound_enter_rho: next(),
            memory_bound_enter_dram: next(), memory_bound_exit_rho: next(),
            memory_bound_exit_dram: next(), mixed_tensor: next(), mixed_dram: next(),
            power_compute_bound: next(), power_memory_bound: next(), power_stalled: next(),
            power_busy_util: next(), comm_bound_enter_nvlink: next(),
            comm_bound_enter_tensor: next(), comm_bound_exit_nvlink: next(),
            comm_bound_exit_tensor: next(), switch_after,
        };
        let cfg = DeriveConfig {
            tau_max: next(), d_max: next(), kappa_max: next(), inflation_min_util: next(),
            max_gap_intervals: next(), headroom: next(), phase, ..DeriveConfig::default()
        };
        let verdict = VerdictConfig {
            idle_util: next(), busy_util: next(), starved_saturation: next(),
            kv_blocked: next(), queued_min: next(),
            causes: truthscale_core::causes::CauseConfig {
                cpu_throttled_ratio: next(), cpu_waiting_ratio: next(), io_waiting_ratio: next(),
                io_stalled_ratio: next(), pcie_rx_share: next(), host_to_device_sm_below: next(),
                launch_gr_active: next(), launch_sm_below: next(), nvlink_share: next(),
                comm_tensor_below: next(), nvlink_tx_wait_per_sec: next(),
            },
            stragglers: truthscale_core::stragglers::StragglerConfig {
                band_mads: next(), min_gap: next(), sustain_seconds: next(),
                ..Default::default()
            },
            health: truthscale_core::health::HealthConfig {
                degraded_violation_share: next(),
            },
        };
        let all_finite = [cfg.tau_max, cfg.d_max, cfg.kappa_max, cfg.headroom].iter().all(|x| x.is_finite());
        if cfg.validate("derive.").is_ok() {
            prop_assert!(all_finite);
        }
        let _ = verdict.validate("verdict.");
        let mut d = Deriver::new(cfg.clone(), Some(1.0));
        d.set_verdict_config(verdict.clone());
        let mut a = Analyzer::new(Deriver::new(cfg, None), false);
        let mut t = 0i64;
        for (delta, entities) in steps {
            t += delta;
            let s = Sample { taken: Timestamp(t), entities };
            a.push(&s);
            for w in d.observe(&s).windows {
                let m = &w.metrics;
                for x in [m.effective_compute, m.roofline_saturation_practical, m.kappa, m.inflation_gap_points] {
                    prop_assert!(finite(x), "{:?}", m);
                }
            }
        }
        for e in a.report().entities {
            if let Some(m) = e.memory {
                prop_assert!(m.needed_bytes.is_finite());
            }
        }
    }
}

fn any_threshold() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..1.0f64,
        1 => -10.0..10.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => any::<f64>(),
    ]
}
