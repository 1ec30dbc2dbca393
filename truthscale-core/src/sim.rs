//! A simulated GPU that follows roofline physics. Deterministic for a seed; time is an input.
//!
//! The simulator runs a workload in 10 ms ticks. Each tick's tensor activity, DRAM activity,
//! busy flag, SM coverage, clock and power follow from the work done in it: prefill is
//! compute-bound (tensor pipe near its practical ceiling), a decode step moves the weights
//! once and does `2·params·batch` FLOP, a collective spins a few SMs while it moves the
//! gradients over NVLink (where the model has it), idle does nothing.
//! A window's readings are tick averages plus counter noise.
//!
//! Ground truth: each tick is labelled with the workload the simulator ran in it (prefill,
//! decode, a training step, an all-reduce, data loading, a spin, idle). A window carries the
//! workload that ran longest and the regime of the time shares
//! ([`crate::model::regime_of_shares`]): what the GPU did, never the classifier's own
//! thresholds applied to its output.
//!
//! Everything the simulator emits is marked `simulated`.

use crate::gpus::GpuSpec;
use crate::model::{
    EntityId, EntitySample, Field, Readings, Sample, ServingSnapshot, Throttles, Timestamp,
    Workload, regime_of_shares,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal, Normal, Poisson};
use std::collections::VecDeque;

const TICK: f64 = 0.01;

/// An all-reduce's NVLink traffic, both directions, over the link's bidirectional peak.
const ALL_REDUCE_NVLINK: f64 = 0.65;

/// The workloads the simulator can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// LLM serving: Poisson-arriving bursts of requests, prefill, continuous-batching decode.
    LlmServing,
    /// Steady decode at a slowly varying batch size.
    DecodeOnly,
    /// Training: compute-bound steps, all-reduces over NVLink, data-loading gaps.
    Training,
    /// A tiny kernel on one SM: the busy flag reads 100 %.
    TinyKernel,
    /// Memory allocated, nothing running.
    IdleAllocated,
}

impl Scenario {
    /// All scenarios.
    pub const ALL: [Scenario; 5] = [
        Scenario::LlmServing,
        Scenario::DecodeOnly,
        Scenario::Training,
        Scenario::TinyKernel,
        Scenario::IdleAllocated,
    ];

    /// Name on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::LlmServing => "llm-serving",
            Scenario::DecodeOnly => "decode-only",
            Scenario::Training => "training",
            Scenario::TinyKernel => "tiny-kernel",
            Scenario::IdleAllocated => "idle-allocated",
        }
    }

    /// Parse a name.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// One tick's instantaneous activity.
#[derive(Debug, Clone, Copy, Default)]
struct Tick {
    busy: f64,
    sm: f64,
    occ: f64,
    tensor: f64,
    dram: f64,
    fp32: f64,
    /// NVLink traffic, both directions, over the model's bidirectional peak.
    nvlink: f64,
}

#[derive(Debug, Clone)]
struct Request {
    prompt: f64,
    remaining_output: f64,
}

#[derive(Debug, Clone)]
enum Work {
    Idle,
    /// A prefill of the first `batch` requests waiting when it began (those that arrive
    /// during it wait for the next).
    Prefill {
        left: f64,
        batch: usize,
    },
    Decode {
        left: f64,
    },
    Train {
        left: f64,
    },
    AllReduce {
        left: f64,
    },
    Loading {
        left: f64,
    },
}

/// One simulated GPU.
#[derive(Debug, Clone)]
pub struct SimGpu {
    scenario: Scenario,
    spec: &'static GpuSpec,
    id: EntityId,
    rng: ChaCha8Rng,
    energy_j: f64,
    // LLM state
    params: f64,
    weight_bytes: f64,
    peak_flops: f64,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    next_burst_in: f64,
    work: Work,
    batch_target: f64,
    train_step: u64,
    prompt_tokens_done: f64,
    output_tokens_done: f64,
    /// Of the tick a serving step finished in, the time left after it: the step started
    /// next, at once, has run that long already (0 when none started), so that steps take
    /// their own time on average, not a whole number of ticks.
    spent: f64,
    /// The time the steps asked for that whole ticks have not run yet (within half a tick
    /// either way).
    owed: f64,
}

/// Practical tensor activity of a compute-bound kernel (GEMMs peak near 0.9; prefill lower).
const TAU_PREFILL: f64 = 0.62;
/// DRAM activity a decode step sustains.
const D_DECODE: f64 = 0.72;

impl SimGpu {
    /// A simulated GPU of model `spec` running `scenario`.
    #[must_use]
    pub fn new(
        scenario: Scenario,
        spec: &'static GpuSpec,
        index: u32,
        node: &str,
        seed: u64,
    ) -> SimGpu {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (u64::from(index) << 32) ^ 0x7275_7468);
        let (peak, bytes_per_param) = match spec.fp8_dense_tflops {
            Some(fp8) => (fp8 * 1e12, 1.0),
            None => (spec.bf16_dense_tflops * 1e12, 2.0),
        };
        let weight_bytes = 0.5 * spec.memory_bytes as f64;
        let uuid = format!(
            "GPU-5137{:04x}-{:04x}-{:04x}-{:04x}-{:012x}",
            index,
            rng.random::<u16>(),
            rng.random::<u16>(),
            rng.random::<u16>(),
            rng.random::<u64>() & 0xffff_ffff_ffff
        );
        let first_burst = Exp::new(1.0 / 3.0).map_or(1.0, |e| e.sample(&mut rng));
        SimGpu {
            scenario,
            spec,
            id: EntityId {
                gpu: Some(index),
                uuid: Some(uuid),
                model: Some(format!("Simulated {}", spec.name)),
                node: Some(node.to_string()),
                // A simulated device's minor number is its index.
                minor: Some(index),
                ..EntityId::default()
            },
            rng,
            energy_j: 0.0,
            params: weight_bytes / bytes_per_param,
            weight_bytes,
            peak_flops: peak,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_burst_in: first_burst,
            work: Work::Idle,
            batch_target: 32.0,
            train_step: 0,
            prompt_tokens_done: 0.0,
            output_tokens_done: 0.0,
            spent: 0.0,
            owed: 0.0,
        }
    }

    /// The entity identity this GPU reports.
    #[must_use]
    pub fn id(&self) -> &EntityId {
        &self.id
    }

    /// The catalog entry this GPU simulates.
    #[must_use]
    pub fn spec(&self) -> &'static GpuSpec {
        self.spec
    }

    /// The scenario.
    #[must_use]
    pub fn scenario(&self) -> Scenario {
        self.scenario
    }

    /// The clock under load: 8 % above the reference clock, never above the model's maximum
    /// (the A100's reference clock is its maximum: 1410 MHz, not 1523).
    fn boost_mhz(&self) -> f64 {
        (self.spec.f_ref_mhz * 1.08).min(self.spec.max_sm_clock_mhz)
    }

    fn arrivals(&mut self, dt: f64) {
        self.next_burst_in -= dt;
        while self.next_burst_in <= 0.0 {
            // A burst of requests (a client batch); bursts arrive as a Poisson process.
            let n = Poisson::new(3.0)
                .map_or(3.0, |p: Poisson<f64>| p.sample(&mut self.rng))
                .max(1.0);
            let prompt = LogNormal::new(8.4, 0.5).ok();
            let output = LogNormal::new(5.8, 0.4).ok();
            for _ in 0..n as usize {
                let p: f64 = prompt.map_or(4500.0, |d| d.sample(&mut self.rng));
                let p = p.min(32_000.0);
                let o: f64 = output.map_or(330.0, |d| d.sample(&mut self.rng));
                let o = o.min(2_000.0);
                self.waiting.push_back(Request {
                    prompt: p,
                    remaining_output: o,
                });
            }
            self.next_burst_in += Exp::new(1.0 / 12.0).map_or(12.0, |e| e.sample(&mut self.rng));
        }
    }

    fn decode_step_seconds(&self, batch: f64) -> f64 {
        // Weights plus KV cache (about 0.2 MB per token of context per request, 1k context).
        let bytes = self.weight_bytes + batch * 1000.0 * 2.0e5;
        bytes / (D_DECODE * self.spec.bandwidth_bytes_per_sec)
    }

    fn llm_tick(&mut self, kappa: f64) -> (Tick, Workload) {
        self.arrivals(TICK);
        if let Work::Idle = self.work {
            let spent = std::mem::take(&mut self.spent);
            if !self.waiting.is_empty() {
                let tokens: f64 = self.waiting.iter().map(|r| r.prompt).sum();
                let flops = 2.0 * self.params * tokens;
                // The prefill runs at the load clock from its second tick on, whatever the
                // clock of the tick it starts in.
                let load = self.boost_mhz() / self.spec.f_ref_mhz;
                let secs = flops / (TAU_PREFILL * load * self.peak_flops);
                self.work = Work::Prefill {
                    left: secs - spent,
                    batch: self.waiting.len(),
                };
            } else if !self.running.is_empty() {
                self.work = Work::Decode {
                    left: self.decode_step_seconds(self.running.len() as f64) - spent,
                };
            }
        }
        let finished = match &mut self.work {
            Work::Prefill { left, .. } | Work::Decode { left } => {
                *left -= TICK;
                // What is left of the tick goes to the next step (at most the tick).
                self.spent = (-*left).clamp(0.0, TICK);
                *left <= 0.0
            }
            _ => false,
        };
        match self.work {
            Work::Prefill { batch, .. } => {
                if finished {
                    // Only the prompts it computed: requests that arrived during it wait.
                    let done = batch.min(self.waiting.len());
                    let prompts: f64 = self.waiting.iter().take(done).map(|r| r.prompt).sum();
                    self.prompt_tokens_done += prompts;
                    self.running.extend(self.waiting.drain(..done));
                    self.work = Work::Idle;
                }
                (self.prefill_tick(), Workload::Prefill)
            }
            Work::Decode { .. } => {
                let batch = self.running.len() as f64;
                let step = self.decode_step_seconds(batch);
                if finished {
                    for r in &mut self.running {
                        r.remaining_output -= 1.0;
                    }
                    self.output_tokens_done += batch;
                    self.running.retain(|r| r.remaining_output > 0.0);
                    self.work = Work::Idle;
                }
                (self.decode_tick(batch, step, kappa), Workload::Decode)
            }
            _ => (Tick::default(), Workload::Idle),
        }
    }

    fn prefill_tick(&self) -> Tick {
        // Weights once per forward plus activations: ρ ≈ 2.7 on an H100.
        Tick {
            busy: 1.0,
            sm: 0.97,
            occ: 0.35,
            tensor: TAU_PREFILL,
            dram: 0.23,
            fp32: 0.04,
            nvlink: 0.0,
        }
    }

    fn decode_tick(&self, batch: f64, step: f64, kappa: f64) -> Tick {
        let flops = 2.0 * self.params * batch;
        let tensor = (flops / (step * kappa * self.peak_flops)).min(0.9);
        Tick {
            busy: 0.98,
            sm: 0.9,
            occ: 0.2,
            tensor,
            dram: D_DECODE,
            fp32: 0.02,
            nvlink: 0.0,
        }
    }

    fn tick(&mut self, kappa: f64) -> (Tick, Workload) {
        match self.scenario {
            Scenario::LlmServing => self.llm_tick(kappa),
            Scenario::DecodeOnly => {
                // Batch drifts slowly between 8 and 64.
                let drift: f64 = Normal::new(0.0, 0.3).map_or(0.0, |n| n.sample(&mut self.rng));
                self.batch_target = (self.batch_target + drift).clamp(8.0, 64.0);
                let b = self.batch_target.round();
                let step = self.decode_step_seconds(b);
                self.output_tokens_done += b * TICK / step;
                (self.decode_tick(b, step, kappa), Workload::Decode)
            }
            Scenario::Training => self.train_tick(),
            Scenario::TinyKernel => {
                let one_sm = 1.0 / f64::from(self.spec.sms);
                (
                    Tick {
                        busy: 1.0,
                        sm: one_sm,
                        occ: one_sm * 0.05,
                        tensor: 0.0,
                        dram: 0.001,
                        fp32: 0.0,
                        nvlink: 0.0,
                    },
                    Workload::Spin,
                )
            }
            Scenario::IdleAllocated => (Tick::default(), Workload::Idle),
        }
    }

    fn train_tick(&mut self) -> (Tick, Workload) {
        let done = match &mut self.work {
            Work::Train { left } | Work::AllReduce { left } | Work::Loading { left } => {
                *left -= TICK;
                *left <= 0.0
            }
            _ => true,
        };
        if done {
            self.work = match self.work {
                Work::Train { .. } => Work::AllReduce { left: 1.5 },
                Work::AllReduce { .. } if self.train_step % 8 == 7 => Work::Loading { left: 2.0 },
                _ => {
                    self.train_step += 1;
                    Work::Train { left: 6.0 }
                }
            };
        }
        match self.work {
            Work::Train { .. } => (
                Tick {
                    busy: 1.0,
                    sm: 0.98,
                    occ: 0.4,
                    tensor: 0.7,
                    dram: 0.35,
                    fp32: 0.05,
                    nvlink: 0.0,
                },
                Workload::TrainingStep,
            ),
            Work::AllReduce { .. } => {
                // NCCL on a few channels: busy flag on, nothing computed, the gradients
                // moving over NVLink at about two thirds of its peak (a ring all-reduce's
                // bus bandwidth). Each byte sent is read from DRAM and each byte received
                // written to it: DRAM busy for the link's traffic at its own bandwidth. A
                // model without NVLink moves them over PCIe and the network, a trickle of
                // DRAM's.
                let s = 16.0 / f64::from(self.spec.sms);
                let link = self
                    .spec
                    .interconnect()
                    .and_then(|l| l.nvlink_bytes_per_sec);
                let nvlink = if link.is_some() {
                    ALL_REDUCE_NVLINK
                } else {
                    0.0
                };
                let dram = link.map_or(0.04, |peak| {
                    (nvlink * peak / self.spec.bandwidth_bytes_per_sec).min(1.0)
                });
                (
                    Tick {
                        busy: 1.0,
                        sm: s,
                        occ: 0.02,
                        tensor: 0.0,
                        dram,
                        fp32: 0.0,
                        nvlink,
                    },
                    Workload::AllReduce,
                )
            }
            Work::Loading { .. } => (Tick::default(), Workload::DataLoading),
            _ => (Tick::default(), Workload::Idle),
        }
    }

    fn noise(&mut self, x: f64, sigma: f64) -> f64 {
        let n: f64 = Normal::new(0.0, sigma).map_or(0.0, |n| n.sample(&mut self.rng));
        x + n
    }

    /// Advance by `dt` seconds and return the window's readings.
    pub fn step(&mut self, dt: f64) -> EntitySample {
        // Whole ticks, the time a step leaves over carried to the next: the work simulated
        // keeps pace with the steps' time (16 ms steps run 2, 1, 2, 1, 2 ticks of 10 ms).
        self.owed += dt;
        let ticks = ((self.owed / TICK).round() as usize).max(1);
        self.owed -= ticks as f64 * TICK;
        let (tokens_p, tokens_o) = (self.prompt_tokens_done, self.output_tokens_done);
        let w = self.run_ticks(ticks);
        let n = ticks as f64;
        // The energy counter grows by the window's mean power over the window's own length,
        // as a board's does: `PowerWatts × dt` exactly, whatever the whole ticks ran.
        self.energy_j += w.power_sum / n * dt;
        let readings = self.readings(&w, n);
        let serving = self.serving(
            self.prompt_tokens_done - tokens_p,
            self.output_tokens_done - tokens_o,
            dt,
        );
        EntitySample {
            id: self.id.clone(),
            readings,
            throttles: Some(Throttles {
                sw_power_cap: w.capped,
                ..Throttles::default()
            }),
            serving,
            truth_phase: regime_of_shares(&w.ran),
            truth_workload: Workload::ALL
                .into_iter()
                .max_by(|a, b| w.ran[a.index()].total_cmp(&w.ran[b.index()])),
            truth_effective_compute: Some((w.truth_acc.tensor / n).clamp(0.0, 1.0)),
            simulated: true,
            sm_clock_is_point: false,
            counters_held: false,
            nvlink_wait_links: 0,
            // No processes, no node mode.
            ..EntitySample::default()
        }
    }

    /// Run `ticks` ticks: the activity summed (the cycle ratios weighted by each tick's
    /// clock), the clock and power summed, the true effective compute, the seconds each
    /// workload ran, and whether the power cap bit.
    fn run_ticks(&mut self, ticks: usize) -> TickSums {
        let mut w = TickSums::default();
        let spec = self.spec;
        for _ in 0..ticks {
            // Clock: boost under load, lower when the power cap bites, low when idle.
            // A serving GPU with requests queued or running starts a step this tick: at
            // the load clock, not the idle one.
            let busy_before = !matches!(self.work, Work::Idle | Work::Loading { .. })
                || matches!(self.scenario, Scenario::DecodeOnly | Scenario::TinyKernel)
                || (self.scenario == Scenario::LlmServing
                    && !(self.waiting.is_empty() && self.running.is_empty()));
            let boost = self.boost_mhz();
            let mut f = if busy_before {
                boost
            } else {
                0.3 * spec.f_ref_mhz
            };
            let (t, workload) = self.tick(f / spec.f_ref_mhz);
            w.ran[workload.index()] += TICK;
            let pi = if t.busy > 0.0 {
                (1.25 * t.tensor + 0.55 * t.dram + 0.05).min(1.05)
            } else {
                0.0
            };
            let mut power =
                spec.idle_power_watts + (spec.max_power_watts - spec.idle_power_watts) * pi;
            if power > spec.max_power_watts {
                // Software power cap: clocks drop to hold the limit (never up: a tick that
                // starts at the idle clock stays there).
                w.capped = true;
                f = f.min(spec.f_ref_mhz * 0.97);
                power = spec.max_power_watts;
            }
            // The busy flag and DRAM bandwidth are fractions of time; the SM, occupancy
            // and pipe counters are ratios of cycles (DCGM, GPM), so a window's value
            // weights each tick by its clock.
            let acc = &mut w.acc;
            acc.busy += t.busy;
            acc.dram += t.dram;
            acc.nvlink += t.nvlink;
            acc.sm += t.sm * f;
            acc.occ += t.occ * f;
            acc.tensor += t.tensor * f;
            acc.fp32 += t.fp32 * f;
            // The true effective compute: tensor work plus FP32 work weighted by its peak,
            // at the clock the tick ran, over the datasheet dense peak.
            w.truth_acc.tensor += (t.tensor + t.fp32 * spec.fp32_tflops / spec.bf16_dense_tflops)
                * f
                / spec.f_ref_mhz;
            w.clock_sum += f;
            w.power_sum += power;
        }
        w
    }

    /// The window's readings from `n` ticks' sums, with the counters' noise.
    fn readings(&mut self, w: &TickSums, n: f64) -> Readings {
        let spec = self.spec;
        let (acc, clock_sum, power_sum) = (&w.acc, w.clock_sum, w.power_sum);
        let mean = |x: f64| x / n;
        let per_cycle = |x: f64| x / clock_sum.max(1e-9);
        let (u, s, o, tau, d, fp32) = (
            mean(acc.busy),
            per_cycle(acc.sm),
            per_cycle(acc.occ),
            per_cycle(acc.tensor),
            mean(acc.dram),
            per_cycle(acc.fp32),
        );

        let mut r = Readings::default();
        let busy_noise = if u > 0.0 && u < 1.0 { 0.01 } else { 0.0 };
        let v = self.noise(u, busy_noise);
        r.set_value(Field::ReportedUtil, v.clamp(0.0, 1.0));
        // 1 % of the range, relative below 0.1 (10 % of the value): a counter of one SM in
        // 132 (0.0076) is never read as 0 by its noise.
        let noisy = |g: &mut SimGpu, x: f64| {
            if x > 0.0 {
                g.noise(x, (0.1 * x).min(0.01)).clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let v = noisy(self, u.min(1.0) * 0.98);
        r.set_value(Field::GrActive, v);
        let sm = noisy(self, s);
        r.set_value(Field::SmActive, sm);
        // Occupancy is of the SMs' time, so never above the SMs' activity.
        let v = noisy(self, o).min(sm);
        r.set_value(Field::SmOccupancy, v);
        let v = noisy(self, tau);
        r.set_value(Field::TensorActive, v);
        let v = noisy(self, d);
        r.set_value(Field::DramActive, v);
        let v = noisy(self, fp32);
        r.set_value(Field::Fp32Active, v);
        // A reading's noise never takes it past the model's maximum clock.
        let clk = self
            .noise(clock_sum / n, 5.0)
            .round()
            .min(spec.max_sm_clock_mhz);
        r.set_value(Field::SmClockMhz, clk);
        r.set_value(Field::PowerWatts, (power_sum / n * 1000.0).round() / 1000.0);
        r.set_value(Field::PowerLimitWatts, spec.max_power_watts);
        r.set_value(
            Field::EnergyJoules,
            (self.energy_j * 1000.0).round() / 1000.0,
        );
        let mem_frac = match self.scenario {
            Scenario::LlmServing | Scenario::DecodeOnly => 0.9,
            Scenario::Training => 0.85,
            Scenario::TinyKernel => 0.02,
            Scenario::IdleAllocated => 0.6,
        };
        let total = spec.memory_bytes as f64;
        r.set_value(Field::MemUsedBytes, (total * mem_frac).round());
        r.set_value(Field::MemTotalBytes, total);
        constant_readings(&mut r);
        // A model with NVLink reads the collectives' traffic on it, half each way.
        if let Some(peak) = spec.interconnect().and_then(|l| l.nvlink_bytes_per_sec) {
            let share = noisy(self, mean(acc.nvlink));
            for f in [Field::NvlinkTxBytesPerSec, Field::NvlinkRxBytesPerSec] {
                r.set_value(f, (share * peak / 2.0).round());
            }
        }
        r.set_value(
            Field::TempCelsius,
            (35.0 + 40.0 * (power_sum / n - spec.idle_power_watts) / spec.max_power_watts).round(),
        );
        r
    }

    /// The serving engine's snapshot, for a serving scenario: `tokens_p` prompt and
    /// `tokens_o` output tokens done in the window of `dt` seconds.
    fn serving(&self, tokens_p: f64, tokens_o: f64, dt: f64) -> Option<ServingSnapshot> {
        matches!(self.scenario, Scenario::LlmServing | Scenario::DecodeOnly).then(|| {
            let batch = match self.scenario {
                Scenario::DecodeOnly => self.batch_target.round(),
                _ => self.running.len() as f64,
            };
            ServingSnapshot {
                engine: Some("sim".into()),
                kv_cache_utilization: Some((batch / 256.0).min(1.0)),
                running_requests: Some(batch),
                queued_requests: Some(self.waiting.len() as f64),
                queue_seconds: None,
                prompt_tokens_per_sec: Some(tokens_p / dt),
                output_tokens_per_sec: Some(tokens_o / dt),
                batch_size: Some(batch),
                max_batch_size: Some(256.0),
                ..ServingSnapshot::default()
            }
        })
    }
}

/// What a window's ticks add up to ([`SimGpu::run_ticks`]).
#[derive(Debug, Default)]
struct TickSums {
    /// The busy flag and DRAM summed; the cycle ratios summed weighted by the clock.
    acc: Tick,
    /// The true effective compute (in `tensor`), summed.
    truth_acc: Tick,
    clock_sum: f64,
    power_sum: f64,
    /// Seconds each workload ran.
    ran: [f64; 7],
    /// Whether the power cap bit.
    capped: bool,
}

/// A host of simulated GPUs stepping together.
#[derive(Debug, Clone)]
pub struct Simulator {
    gpus: Vec<SimGpu>,
    now: Timestamp,
}

impl Simulator {
    /// `count` GPUs of `spec`, each running the scenario `scenario_of(index)`.
    #[must_use]
    pub fn new(
        count: u32,
        spec: &'static GpuSpec,
        node: &str,
        seed: u64,
        start: Timestamp,
        scenario_of: impl Fn(u32) -> Scenario,
    ) -> Simulator {
        let gpus = (0..count)
            .map(|i| SimGpu::new(scenario_of(i), spec, i, node, seed))
            .collect();
        Simulator { gpus, now: start }
    }

    /// The default contrast for a demo: GPU i runs scenario i mod 5, starting with llm-serving.
    #[must_use]
    pub fn demo_scenario(index: u32) -> Scenario {
        Scenario::ALL[index as usize % Scenario::ALL.len()]
    }

    /// Advance every GPU by `dt` seconds.
    pub fn step(&mut self, dt: f64) -> Sample {
        self.now = self.now.plus_seconds(dt);
        let taken = self.now;
        Sample {
            taken,
            entities: self.gpus.iter_mut().map(|g| g.step(dt)).collect(),
        }
    }

    /// Advance every GPU by `dt` seconds as `n` sub-steps of `dt / n` seconds each, and
    /// return the `n` samples, oldest first: one window sampled faster than it is exported
    /// (a 1 s export fed by ten 100 ms samples is `step_substeps(1.0, 10)`). The samples are
    /// exactly those of `n` calls of [`Simulator::step`] with `dt / n`, so `dt / n` should be
    /// a whole number of the simulator's 10 ms ticks (and of milliseconds, the timestamps'
    /// resolution), as any step's length should. `n` of 0 counts as 1.
    pub fn step_substeps(&mut self, dt: f64, n: usize) -> Vec<Sample> {
        let n = n.max(1);
        let sub = dt / n as f64;
        (0..n).map(|_| self.step(sub)).collect()
    }

    /// The simulated GPUs.
    #[must_use]
    pub fn gpus(&self) -> &[SimGpu] {
        &self.gpus
    }

    /// Simulated time now.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        self.now
    }
}

/// What a simulated GPU always reads: no FP16 or FP64 work, and healthy (no XID, no row
/// remap pending or failed, no recovery asked for: docs/verdicts.md, Health).
fn constant_readings(r: &mut Readings) {
    for f in [
        Field::Fp16Active,
        Field::Fp64Active,
        Field::XidLast,
        Field::RowRemapPending,
        Field::RowRemapFailed,
        Field::RecoveryAction,
    ] {
        r.set_value(f, 0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::by_key;
    use crate::model::Phase;

    fn run(s: Scenario, secs: f64, dt: f64) -> Vec<EntitySample> {
        let mut sim = Simulator::new(1, by_key("h100-sxm").unwrap(), "n", 7, Timestamp(0), |_| s);
        (0..(secs / dt) as usize)
            .map(|_| sim.step(dt).entities.remove(0))
            .collect()
    }

    /// Steps that are no whole number of ticks (16 ms of 10 ms ticks): each window's energy
    /// is its power reading times its own length, as a board's counter is (it rose by two
    /// ticks' 20 ms of power a 16 ms step: 1.25× the power read).
    #[test]
    fn steps_of_any_length_keep_energy_with_the_power_read() {
        for s in [Scenario::Training, Scenario::LlmServing] {
            let w = run(s, 8.0, 0.016);
            let energy = |e: &EntitySample| e.readings.value(Field::EnergyJoules).unwrap();
            for pair in w.windows(2) {
                let power = pair[1].readings.value(Field::PowerWatts).unwrap();
                let rise = energy(&pair[1]) - energy(&pair[0]);
                // Both rounded to a thousandth (W and J).
                assert!(
                    (rise - power * 0.016).abs() < 2e-3,
                    "{s:?}: {rise} J, {power} W"
                );
            }
        }
    }

    /// No simulated GPU runs above its model's maximum clock (the datasheet's, not 1.08 ×
    /// the reference clock: an A100's reference clock is its maximum), whatever the model.
    #[test]
    fn the_clock_never_passes_the_models_maximum() {
        for spec in crate::gpus::CATALOG {
            let mut sim = Simulator::new(1, spec, "n", 7, Timestamp(0), |_| Scenario::Training);
            for _ in 0..60 {
                let e = sim.step(1.0).entities.remove(0);
                let clock = e.readings.value(Field::SmClockMhz).unwrap();
                // The reading's noise (5 MHz, σ) never takes it past the maximum.
                assert!(clock <= spec.max_sm_clock_mhz, "{}: {clock}", spec.name);
            }
        }
    }

    /// A serving GPU runs its steps at the load clock: every 1 s window busy throughout
    /// (reading 98 % or more: a decode tick's own busy flag) reads a clock within 3 % of it
    /// (a step's first tick ran at the idle clock, 0.3 × the reference, and decode read
    /// κ ≈ 0.69 while busy).
    #[test]
    fn a_busy_serving_gpu_runs_at_the_load_clock() {
        let spec = by_key("h100-sxm").unwrap();
        let load = 1.08 * spec.f_ref_mhz;
        let busy: Vec<f64> = run(Scenario::LlmServing, 600.0, 1.0)
            .iter()
            .filter(|e| {
                e.readings
                    .value(Field::ReportedUtil)
                    .is_some_and(|u| u >= 0.98)
            })
            .filter_map(|e| e.readings.value(Field::SmClockMhz))
            .collect();
        assert!(busy.len() > 100, "{}", busy.len());
        for clock in busy {
            assert!((clock - load).abs() < 0.03 * load, "{clock} against {load}");
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a = run(Scenario::LlmServing, 5.0, 0.25);
        let b = run(Scenario::LlmServing, 5.0, 0.25);
        assert_eq!(a, b);
        assert!(a.iter().all(|e| e.simulated));
    }

    #[test]
    fn tiny_kernel_reads_busy_on_one_sm() {
        let w = run(Scenario::TinyKernel, 2.0, 1.0);
        let r = &w[1].readings;
        assert_eq!(r.value(Field::ReportedUtil), Some(1.0));
        assert!(r.value(Field::SmActive).unwrap() < 0.03);
        assert_eq!(w[1].truth_phase, Some(Phase::Stalled));
    }

    #[test]
    fn decode_is_memory_bound_and_power_is_about_half() {
        let w = run(Scenario::DecodeOnly, 5.0, 1.0);
        let r = &w[4].readings;
        let tau = r.value(Field::TensorActive).unwrap();
        let d = r.value(Field::DramActive).unwrap();
        assert!(tau < 0.1 && d > 0.6, "tau {tau} d {d}");
        let p = r.value(Field::PowerWatts).unwrap();
        assert!((p - (75.0 + 625.0 * 0.49)).abs() < 60.0, "power {p}");
        assert_eq!(w[4].truth_phase, Some(Phase::MemoryBound));
    }

    #[test]
    fn energy_counter_is_monotonic() {
        let w = run(Scenario::Training, 20.0, 0.5);
        let e: Vec<f64> = w
            .iter()
            .map(|x| x.readings.value(Field::EnergyJoules).unwrap())
            .collect();
        assert!(e.windows(2).all(|p| p[1] > p[0]));
    }

    /// A prefill computes the prompts waiting when it began, and only those are credited:
    /// two requests of 1 000 and 3 000 prompt tokens start one, a third of 50 000 arrives
    /// during it, and when it ends 4 000 prompt tokens are done, two requests run and the
    /// third waits for the next prefill (crediting it too had counted 54 000 tokens whose
    /// compute never ran).
    #[test]
    fn a_prefill_credits_only_the_prompts_it_computed() {
        let mut g = SimGpu::new(Scenario::LlmServing, by_key("h100-sxm").unwrap(), 0, "n", 7);
        g.next_burst_in = f64::INFINITY;
        let request = |prompt| Request {
            prompt,
            remaining_output: 10.0,
        };
        g.waiting.extend([request(1000.0), request(3000.0)]);
        g.llm_tick(1.0);
        assert!(
            matches!(g.work, Work::Prefill { batch: 2, .. }),
            "{:?}",
            g.work
        );
        g.waiting.push_back(request(50_000.0));
        while matches!(g.work, Work::Prefill { .. }) {
            g.llm_tick(1.0);
        }
        assert_eq!(g.prompt_tokens_done, 4000.0);
        assert_eq!(g.running.len(), 2);
        assert_eq!(g.waiting.len(), 1);
    }

    #[test]
    fn llm_serving_visits_prefill_decode_and_idle() {
        let w = run(Scenario::LlmServing, 120.0, 0.25);
        for p in [Phase::ComputeBound, Phase::MemoryBound, Phase::Idle] {
            let n = w.iter().filter(|e| e.truth_phase == Some(p)).count();
            assert!(n > 10, "{p}: {n}");
        }
    }

    /// An all-reduce moves the gradients over NVLink at 65 % of the model's bidirectional
    /// peak, half each way: on an H100 SXM (900 GB/s) a window wholly inside one reads about
    /// 292.5 GB/s each way (1 % noise on the share), and its truth is comm-bound; a training
    /// step reads no traffic. What it sends is read from DRAM and what it receives written
    /// there: 585 GB/s of the H100's 3.35 TB/s, a DRAM activity of 0.175. A model without
    /// NVLink (L4) reads no NVLink field at all.
    #[test]
    fn an_all_reduce_reads_its_nvlink_traffic() {
        let w = run(Scenario::Training, 60.0, 0.25);
        let each_way = |e: &EntitySample| {
            let r = &e.readings;
            (
                r.value(Field::NvlinkTxBytesPerSec),
                r.value(Field::NvlinkRxBytesPerSec),
            )
        };
        let (mut all_reduce, mut dram) = (Vec::new(), Vec::new());
        for e in &w {
            let (tx, rx) = each_way(e);
            let (tx, rx) = (tx.unwrap(), rx.unwrap());
            assert_eq!(tx, rx);
            if e.truth_workload == Some(Workload::AllReduce) {
                dram.push(e.readings.value(Field::DramActive).unwrap());
            }
            // Never above the all-reduce's 292.5 GB/s but for the noise.
            assert!(tx < 292.5e9 + 0.04 * 450e9, "{tx}");
            match e.truth_workload {
                Some(Workload::AllReduce) => {
                    assert_eq!(e.truth_phase, Some(Phase::CommBound));
                    // Most of the window: at least half the traffic.
                    assert!(tx > 0.5 * 292.5e9 - 0.04 * 450e9, "{tx}");
                    all_reduce.push(tx);
                }
                Some(Workload::TrainingStep | Workload::DataLoading) => {
                    assert!(tx < 0.5 * 292.5e9 + 0.04 * 450e9, "{tx}");
                }
                other => panic!("{other:?}"),
            }
        }
        // 1.5 s all-reduces in 0.25 s windows: most windows lie wholly inside one.
        assert!(
            all_reduce.len() >= 10,
            "{} all-reduce windows",
            all_reduce.len()
        );
        all_reduce.sort_by(f64::total_cmp);
        let median = all_reduce[all_reduce.len() / 2];
        assert!((median - 292.5e9).abs() < 0.02 * 450e9, "{median}");
        dram.sort_by(f64::total_cmp);
        let median = dram[dram.len() / 2];
        assert!((median - 585.0 / 3350.0).abs() < 0.02, "{median}");
        let l4 = by_key("l4").unwrap();
        let mut sim = Simulator::new(1, l4, "n", 7, Timestamp(0), |_| Scenario::Training);
        for _ in 0..40 {
            let e = sim.step(0.25).entities.remove(0);
            assert_eq!(each_way(&e), (None, None));
        }
    }

    /// A serving step takes its own time on average, not a whole number of 10 ms ticks: an
    /// H100 SXM (80 GB, 3.35 TB/s) with 40 GB of weights decoding a steady batch of 32
    /// requests (1 000 tokens of context, 0.2 MB each) moves 46.4 GB a step at 72 % of its
    /// bandwidth: 19.24 ms a step, 1 663.4 tokens a second. Over a minute that is 99 807
    /// tokens, within a step's 32; rounding each step up to two ticks made it 96 000.
    #[test]
    fn decode_steps_take_their_own_time() {
        let spec = by_key("h100-sxm").unwrap();
        let mut g = SimGpu::new(Scenario::LlmServing, spec, 0, "n", 7);
        g.next_burst_in = f64::INFINITY;
        g.running = vec![
            Request {
                prompt: 1000.0,
                remaining_output: 1e9,
            };
            32
        ];
        for _ in 0..60 {
            g.step(1.0);
        }
        let step: f64 = 46.4e9 / (0.72 * 3.35e12);
        let want = 60.0 / step * 32.0;
        assert!((want - 99_807.0).abs() < 1.0, "{want}");
        let got = g.output_tokens_done;
        assert!((got - want).abs() <= 32.0, "{got} tokens against {want}");
    }
}
