//! Property tests: no input makes derivation panic or emit a non-finite value.

use proptest::prelude::*;
use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::model::{
    EntityId, EntitySample, Field, MigId, Reading, Readings, Sample, Throttles, Timestamp,
};
use truthscale_core::tracker::Deriver;

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
    )
        .prop_map(|(rs, gpu, gi, model, capped)| {
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
                ..EntitySample::default()
            }
        })
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
            for w in d.observe(&s).windows {
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
            let f = e.phase_fraction;
            let sum = f.idle + f.prefill + f.decode + f.mixed + f.stalled + f.underloaded;
            prop_assert!(sum.is_finite() && (sum == 0.0 || (sum - 1.0).abs() < 1e-9));
        }
    }
}
