//! The GPU catalog: datasheet peaks per model, and the MIG profiles each model offers.
//!
//! Dense (no 2:4 sparsity) tensor peaks from NVIDIA datasheets; `f_ref` is the SM clock the
//! datasheet peak implies (SMs × FLOP/clk/SM × f_ref = peak), which is not the maximum clock.
//! Idle power is an offline fallback (the lowest observed power at zero utilization is preferred).
//! The MIG tables are an offline fallback too: a live source should query profiles at run time.

/// Datasheet values for one GPU model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSpec {
    /// Stable short key, such as `h100-sxm`.
    pub key: &'static str,
    /// Human name.
    pub name: &'static str,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Dense BF16/FP16 tensor peak, TFLOP/s.
    pub bf16_dense_tflops: f64,
    /// Dense FP8 tensor peak, TFLOP/s, where the model has FP8.
    pub fp8_dense_tflops: Option<f64>,
    /// Non-tensor FP32 peak, TFLOP/s.
    pub fp32_tflops: f64,
    /// Non-tensor FP16 peak, TFLOP/s (used to weight the FP16 pipe).
    pub fp16_tflops: f64,
    /// Memory size in bytes.
    pub memory_bytes: u64,
    /// The largest memory size a GPU matched to this entry can report, in bytes: the
    /// catalog's figure except where one entry covers variants (GH200: 96 GB and 144 GB).
    /// Sanitizing bounds memory readings by it.
    pub max_memory_bytes: u64,
    /// Memory bandwidth in bytes per second.
    pub bandwidth_bytes_per_sec: f64,
    /// The SM clock (MHz) at which the datasheet tensor peak is defined.
    pub f_ref_mhz: f64,
    /// Maximum (boost) SM clock, MHz, as `nvidia-smi -q` lists under Max Clocks. Sanitizing
    /// bounds SM clock readings by it (with a tolerance).
    pub max_sm_clock_mhz: f64,
    /// Maximum board power, watts.
    pub max_power_watts: f64,
    /// Typical idle power, watts (fallback; assumption except where cited).
    pub idle_power_watts: f64,
    /// MIG profiles, empty where the model has no MIG.
    pub mig: &'static [MigProfile],
}

impl GpuSpec {
    /// Ridge point of the dense BF16 roofline, FLOP per byte.
    #[must_use]
    pub fn ridge_bf16(&self) -> f64 {
        self.bf16_dense_tflops * 1e12 / self.bandwidth_bytes_per_sec
    }

    /// The spec of one MIG instance of profile `name` as far as peaks go: the compute
    /// peaks times its SMs' share of the GPU's, the bandwidth and memory times its memory
    /// slices' share; `None` for a profile the catalog lacks.
    #[must_use]
    pub fn of_profile(&self, name: &str) -> Option<GpuSpec> {
        let p = self.mig.iter().find(|p| p.name == name)?;
        let sm = f64::from(p.sms) / f64::from(self.sms.max(1));
        let mem = f64::from(p.memory_slices) / f64::from(p.memory_slices_total.max(1));
        Some(GpuSpec {
            sms: p.sms,
            bf16_dense_tflops: self.bf16_dense_tflops * sm,
            fp8_dense_tflops: self.fp8_dense_tflops.map(|t| t * sm),
            fp32_tflops: self.fp32_tflops * sm,
            fp16_tflops: self.fp16_tflops * sm,
            bandwidth_bytes_per_sec: self.bandwidth_bytes_per_sec * mem,
            memory_bytes: p.memory_bytes,
            max_memory_bytes: p.memory_bytes,
            mig: &[],
            ..*self
        })
    }

    /// The share of a whole GPU of this model that a MIG instance of the profile `name` is:
    /// its compute slices over the GPU's (the largest profile's); `None` for a profile the
    /// model does not list.
    #[must_use]
    pub fn share_of_profile(&self, name: &str) -> Option<f64> {
        let p = self.mig.iter().find(|p| p.name == name)?;
        let total = self.mig.iter().map(|p| p.compute_slices).max()?;
        Some(f64::from(p.compute_slices) / f64::from(total.max(1)))
    }
}

/// One MIG GPU-instance profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigProfile {
    /// Profile name, such as `3g.40gb`.
    pub name: &'static str,
    /// Compute slices (of 7, or 4 on A30).
    pub compute_slices: u32,
    /// Memory slices.
    pub memory_slices: u32,
    /// Memory slices the whole GPU has (8, or 4 on A30).
    pub memory_slices_total: u32,
    /// SMs in the instance.
    pub sms: u32,
    /// Nominal memory in bytes (the GB figure in the name).
    pub memory_bytes: u64,
    /// How many such instances fit on one GPU.
    pub max_instances: u32,
}

const GB: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;

/// Usable memory as `nvidia-smi mig -lgip` lists it (`memorySizeMB`).
const fn mib(n: u64) -> u64 {
    n * MIB
}

/// The nominal memory in a profile's name (decimal GB), where no listing was available: the
/// usable memory NVIDIA lists can be a few percent off it either way.
const fn gb(n: u64) -> u64 {
    n * GB
}

macro_rules! mig {
    ($name:literal, $c:expr, $m:expr, $mt:expr, $sms:expr, $bytes:expr, $n:expr) => {
        MigProfile {
            name: $name,
            compute_slices: $c,
            memory_slices: $m,
            memory_slices_total: $mt,
            sms: $sms,
            memory_bytes: $bytes,
            max_instances: $n,
        }
    };
}

// SM counts and usable memory per profile come from NVIDIA's MIG profile listings
// (`nvidia-smi mig -lgip`, `multiprocessorCount` and `memorySizeMB`). The double-memory
// 1g profiles (1g.10gb on A100 40GB, 1g.20gb on the 80 GB parts, …) are not 1g.5gb/1g.10gb
// with more memory: on an H100 SXM the 1g.20gb instance has 26 SMs, not 16. Where a listing
// was not available (marked), the SM count is the one of the closest listed part.
const MIG_A100_40: &[MigProfile] = &[
    mig!("1g.5gb", 1, 1, 8, 14, mib(4864), 7),
    mig!("1g.10gb", 1, 2, 8, 14, gb(10), 4),
    mig!("2g.10gb", 2, 2, 8, 28, gb(10), 3),
    mig!("3g.20gb", 3, 4, 8, 42, gb(20), 2),
    mig!("4g.20gb", 4, 4, 8, 56, gb(20), 1),
    mig!("7g.40gb", 7, 8, 8, 98, gb(40), 1),
];
const MIG_A100_80: &[MigProfile] = &[
    mig!("1g.10gb", 1, 1, 8, 14, gb(10), 7),
    mig!("1g.20gb", 1, 2, 8, 14, gb(20), 4),
    mig!("2g.20gb", 2, 2, 8, 28, gb(20), 3),
    mig!("3g.40gb", 3, 4, 8, 42, gb(40), 2),
    mig!("4g.40gb", 4, 4, 8, 56, gb(40), 1),
    mig!("7g.80gb", 7, 8, 8, 98, gb(80), 1),
];
// H100 80GB HBM3 (SXM5), from its listing.
const MIG_H100_SXM: &[MigProfile] = &[
    mig!("1g.10gb", 1, 1, 8, 16, mib(9984), 7),
    mig!("1g.20gb", 1, 2, 8, 26, mib(20096), 4),
    mig!("2g.20gb", 2, 2, 8, 32, mib(20096), 3),
    mig!("3g.40gb", 3, 4, 8, 60, mib(40448), 2),
    mig!("4g.40gb", 4, 4, 8, 64, mib(40448), 1),
    mig!("7g.80gb", 7, 8, 8, 132, mib(81152), 1),
];
// H100 PCIe (114 SMs), from its listing: fewer SMs per slice than the SXM part.
const MIG_H100_PCIE: &[MigProfile] = &[
    mig!("1g.10gb", 1, 1, 8, 14, mib(9984), 7),
    mig!("1g.20gb", 1, 2, 8, 14, mib(20096), 4),
    mig!("2g.20gb", 2, 2, 8, 30, mib(20096), 3),
    mig!("3g.40gb", 3, 4, 8, 46, mib(40448), 2),
    mig!("4g.40gb", 4, 4, 8, 62, mib(40448), 1),
    mig!("7g.80gb", 7, 8, 8, 114, mib(81152), 1),
];
// H100 NVL 94GB (132 SMs): no listing available; SM counts of the 132-SM SXM part.
const MIG_H100_NVL: &[MigProfile] = &[
    mig!("1g.12gb", 1, 1, 8, 16, gb(12), 7),
    mig!("1g.24gb", 1, 2, 8, 26, gb(24), 4),
    mig!("2g.24gb", 2, 2, 8, 32, gb(24), 3),
    mig!("3g.47gb", 3, 4, 8, 60, gb(47), 2),
    mig!("4g.47gb", 4, 4, 8, 64, gb(47), 1),
    mig!("7g.94gb", 7, 8, 8, 132, gb(94), 1),
];
// H200 141GB: 1g.18gb from its listing (16 SMs, 16 GiB); the rest with the SM counts of
// the 132-SM H100 SXM.
const MIG_H200_141: &[MigProfile] = &[
    mig!("1g.18gb", 1, 1, 8, 16, mib(16384), 7),
    mig!("1g.35gb", 1, 2, 8, 26, gb(35), 4),
    mig!("2g.35gb", 2, 2, 8, 32, gb(35), 3),
    mig!("3g.71gb", 3, 4, 8, 60, gb(71), 2),
    mig!("4g.71gb", 4, 4, 8, 64, gb(71), 1),
    mig!("7g.141gb", 7, 8, 8, 132, gb(141), 1),
];
// B200 SM counts per slice are not published; floor(148 × c / 7) is used (approximate).
const MIG_B200_180: &[MigProfile] = &[
    mig!("1g.23gb", 1, 1, 8, 21, gb(23), 7),
    mig!("1g.45gb", 1, 2, 8, 21, gb(45), 4),
    mig!("2g.45gb", 2, 2, 8, 42, gb(45), 3),
    mig!("3g.90gb", 3, 4, 8, 63, gb(90), 2),
    mig!("4g.90gb", 4, 4, 8, 84, gb(90), 1),
    mig!("7g.180gb", 7, 8, 8, 148, gb(180), 1),
];
const MIG_A30: &[MigProfile] = &[
    mig!("1g.6gb", 1, 1, 4, 14, gb(6), 4),
    mig!("2g.12gb", 2, 2, 4, 28, gb(12), 2),
    mig!("4g.24gb", 4, 4, 4, 56, gb(24), 1),
];

macro_rules! spec {
    ($key:literal, $name:literal, sms $sms:expr, bf16 $bf16:expr, fp8 $fp8:expr, fp32 $fp32:expr,
     fp16 $fp16:expr, mem_gb $mem:expr, bw_tbs $bw:expr, fref $fref:expr, max_clk $clk:expr,
     power $p:expr, idle $idle:expr, mig $mig:expr) => {
        GpuSpec {
            key: $key,
            name: $name,
            sms: $sms,
            bf16_dense_tflops: $bf16,
            fp8_dense_tflops: $fp8,
            fp32_tflops: $fp32,
            fp16_tflops: $fp16,
            memory_bytes: $mem * GB,
            max_memory_bytes: $mem * GB,
            bandwidth_bytes_per_sec: $bw * 1e12,
            f_ref_mhz: $fref,
            max_sm_clock_mhz: $clk,
            max_power_watts: $p,
            idle_power_watts: $idle,
            mig: $mig,
        }
    };
}

/// Every model truthscale knows. `max_clk` is the maximum (boost) SM clock of NVIDIA's
/// datasheets and `nvidia-smi -q` (Max Clocks); B200's (1980 MHz) is from third-party
/// listings, NVIDIA's datasheet gives none.
pub const CATALOG: &[GpuSpec] = &[
    spec!("a100-40-pcie", "A100 40GB PCIe", sms 108, bf16 312.0, fp8 None, fp32 19.5, fp16 78.0,
          mem_gb 40, bw_tbs 1.555, fref 1410.0, max_clk 1410.0, power 250.0, idle 35.0,
          mig MIG_A100_40),
    spec!("a100-80-pcie", "A100 80GB PCIe", sms 108, bf16 312.0, fp8 None, fp32 19.5, fp16 78.0,
          mem_gb 80, bw_tbs 1.935, fref 1410.0, max_clk 1410.0, power 300.0, idle 40.0,
          mig MIG_A100_80),
    spec!("a100-40-sxm", "A100 40GB SXM", sms 108, bf16 312.0, fp8 None, fp32 19.5, fp16 78.0,
          mem_gb 40, bw_tbs 1.555, fref 1410.0, max_clk 1410.0, power 400.0, idle 55.0,
          mig MIG_A100_40),
    spec!("a100-80-sxm", "A100 80GB SXM", sms 108, bf16 312.0, fp8 None, fp32 19.5, fp16 78.0,
          mem_gb 80, bw_tbs 2.039, fref 1410.0, max_clk 1410.0, power 400.0, idle 63.0,
          mig MIG_A100_80),
    spec!("h100-sxm", "H100 SXM", sms 132, bf16 989.0, fp8 Some(1979.0), fp32 67.0, fp16 134.0,
          mem_gb 80, bw_tbs 3.35, fref 1830.0, max_clk 1980.0, power 700.0, idle 75.0,
          mig MIG_H100_SXM),
    spec!("h100-pcie", "H100 PCIe", sms 114, bf16 756.0, fp8 Some(1513.0), fp32 51.0, fp16 102.0,
          mem_gb 80, bw_tbs 2.0, fref 1619.0, max_clk 1755.0, power 350.0, idle 50.0,
          mig MIG_H100_PCIE),
    spec!("h100-nvl", "H100 NVL", sms 132, bf16 835.0, fp8 Some(1671.0), fp32 60.0, fp16 120.0,
          mem_gb 94, bw_tbs 3.9, fref 1544.0, max_clk 1785.0, power 400.0, idle 55.0,
          mig MIG_H100_NVL),
    spec!("h200-sxm", "H200 SXM", sms 132, bf16 989.0, fp8 Some(1979.0), fp32 67.0, fp16 134.0,
          mem_gb 141, bw_tbs 4.8, fref 1830.0, max_clk 1980.0, power 700.0, idle 75.0,
          mig MIG_H200_141),
    spec!("h200-nvl", "H200 NVL", sms 132, bf16 835.0, fp8 Some(1671.0), fp32 60.0, fp16 120.0,
          mem_gb 141, bw_tbs 4.8, fref 1544.0, max_clk 1785.0, power 600.0, idle 65.0,
          mig MIG_H200_141),
    // GH200: the Hopper GPU of the Grace Hopper superchip, its own model (not an H200):
    // 96 GB HBM3 at 4.0 TB/s (the 144 GB HBM3e variant reports its own memory size, hence
    // its larger `max_memory_bytes`). Its power limit covers the whole module, so the NVML
    // limit is preferred. No MIG table.
    GpuSpec {
        max_memory_bytes: 144 * GB,
        ..spec!("gh200", "GH200", sms 132, bf16 989.0, fp8 Some(1979.0), fp32 67.0, fp16 134.0,
                mem_gb 96, bw_tbs 4.0, fref 1830.0, max_clk 1980.0, power 900.0, idle 100.0,
                mig &[])
    },
    spec!("b200", "B200", sms 148, bf16 2250.0, fp8 Some(4500.0), fp32 75.0, fp16 150.0,
          mem_gb 180, bw_tbs 8.0, fref 1856.0, max_clk 1980.0, power 1000.0, idle 140.0,
          mig MIG_B200_180),
    spec!("l4", "L4", sms 58, bf16 121.0, fp8 Some(242.0), fp32 30.3, fp16 30.3,
          mem_gb 24, bw_tbs 0.300, fref 2037.0, max_clk 2040.0, power 72.0, idle 16.0, mig &[]),
    spec!("l40s", "L40S", sms 142, bf16 362.0, fp8 Some(733.0), fp32 91.6, fp16 91.6,
          mem_gb 48, bw_tbs 0.864, fref 2490.0, max_clk 2520.0, power 350.0, idle 35.0, mig &[]),
    spec!("a10", "A10", sms 72, bf16 125.0, fp8 None, fp32 31.2, fp16 31.2,
          mem_gb 24, bw_tbs 0.600, fref 1695.0, max_clk 1695.0, power 150.0, idle 20.0, mig &[]),
    spec!("a10g", "A10G", sms 80, bf16 70.0, fp8 None, fp32 35.0, fp16 35.0,
          mem_gb 24, bw_tbs 0.600, fref 1710.0, max_clk 1710.0, power 300.0, idle 20.0, mig &[]),
    spec!("a30", "A30", sms 56, bf16 165.0, fp8 None, fp32 10.3, fp16 41.0,
          mem_gb 24, bw_tbs 0.933, fref 1440.0, max_clk 1440.0, power 165.0, idle 30.0,
          mig MIG_A30),
    // Turing has no BF16: the 16-bit tensor figure is the FP16 one.
    spec!("t4", "T4", sms 40, bf16 65.0, fp8 None, fp32 8.1, fp16 16.2,
          mem_gb 16, bw_tbs 0.320, fref 1590.0, max_clk 1590.0, power 70.0, idle 10.0, mig &[]),
];

/// A model's host link and NVLink: the interconnect peaks beside the FLOP peaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interconnect {
    /// The PCIe generation of the board's host link.
    pub pcie_gen: u32,
    /// Its lanes.
    pub pcie_lanes: u32,
    /// NVLink bandwidth, both directions together, bytes per second (datasheet; for the
    /// PCIe boards through their NVLink bridge); `None` where the model has no NVLink.
    pub nvlink_bytes_per_sec: Option<f64>,
}

/// The interconnect of each model, by key (NVIDIA datasheets: A100 and H100 PCIe, NVL and
/// SXM; H200 NVL and SXM; GH200; HGX B200; L4, L40S, A10, A30, T4; A10G as A10).
const INTERCONNECTS: &[(&str, Interconnect)] = &[
    ("a100-40-pcie", link(4, Some(600.0))),
    ("a100-80-pcie", link(4, Some(600.0))),
    ("a100-40-sxm", link(4, Some(600.0))),
    ("a100-80-sxm", link(4, Some(600.0))),
    ("h100-sxm", link(5, Some(900.0))),
    ("h100-pcie", link(5, Some(600.0))),
    ("h100-nvl", link(5, Some(600.0))),
    ("h200-sxm", link(5, Some(900.0))),
    ("h200-nvl", link(5, Some(900.0))),
    ("gh200", link(5, Some(900.0))),
    ("b200", link(5, Some(1800.0))),
    ("l4", link(4, None)),
    ("l40s", link(4, None)),
    ("a10", link(4, None)),
    ("a10g", link(4, None)),
    ("a30", link(4, Some(200.0))),
    ("t4", link(3, None)),
];

/// A x16 link of `generation` and NVLink of `nvlink_gbs` GB/s.
const fn link(generation: u32, nvlink_gbs: Option<f64>) -> Interconnect {
    Interconnect {
        pcie_gen: generation,
        pcie_lanes: 16,
        nvlink_bytes_per_sec: match nvlink_gbs {
            Some(g) => Some(g * 1e9),
            None => None,
        },
    }
}

impl GpuSpec {
    /// The model's host link and NVLink peak.
    #[must_use]
    pub fn interconnect(&self) -> Option<Interconnect> {
        INTERCONNECTS
            .iter()
            .find(|(k, _)| *k == self.key)
            .map(|(_, l)| *l)
    }
}

/// Find a spec by its short key (`h100-sxm`).
#[must_use]
pub fn by_key(key: &str) -> Option<&'static GpuSpec> {
    CATALOG.iter().find(|s| s.key.eq_ignore_ascii_case(key))
}

/// Match a model name as NVML or DCGM report it (`NVIDIA H100 80GB HBM3`, `Tesla T4`),
/// or a short key. Returns `None` for a model not in the catalog.
///
/// ```
/// use truthscale_core::gpus::lookup;
/// assert_eq!(lookup("NVIDIA H100 80GB HBM3").unwrap().key, "h100-sxm");
/// assert_eq!(lookup("Tesla T4").unwrap().key, "t4");
/// assert!(lookup("NVIDIA RTX 4000 Ada Generation").is_none());
/// ```
#[must_use]
pub fn lookup(name: &str) -> Option<&'static GpuSpec> {
    if let Some(s) = by_key(name.trim()) {
        return Some(s);
    }
    let lower = name.to_ascii_lowercase().replace(['_', '-'], " ");
    let tokens: Vec<&str> = lower.split_whitespace().collect();
    let has = |t: &str| tokens.contains(&t);
    let any = |t: &str| lower.contains(t);
    let key = if has("b200") {
        "b200"
    } else if any("gh200") {
        "gh200"
    } else if any("h200") {
        if has("nvl") { "h200-nvl" } else { "h200-sxm" }
    } else if any("h100") {
        if has("nvl") {
            "h100-nvl"
        } else if has("pcie") {
            "h100-pcie"
        } else {
            "h100-sxm"
        }
    } else if any("a100") {
        let big = any("80gb");
        let pcie = has("pcie");
        match (big, pcie) {
            (true, true) => "a100-80-pcie",
            (true, false) => "a100-80-sxm",
            (false, true) => "a100-40-pcie",
            (false, false) => "a100-40-sxm",
        }
    } else if has("l40s") {
        "l40s"
    } else if has("l4") {
        "l4"
    } else if has("a10g") {
        "a10g"
    } else if has("a10") {
        "a10"
    } else if has("a30") {
        "a30"
    } else if has("t4") {
        "t4"
    } else {
        return None;
    };
    by_key(key)
}

#[cfg(test)]
mod tests {

    /// A MIG instance's peaks are its share of the GPU's: an H100 SXM 3g.40gb has 60 of the
    /// 132 SMs and 4 of the 8 memory slices, so 989 × 60/132 = 449.5 dense BF16 TFLOP/s and
    /// 3.35 × 4/8 = 1.675 TB/s (datasheet figures typed in).
    #[test]
    fn a_mig_instance_has_its_share_of_the_peaks() {
        let h = by_key("h100-sxm").unwrap();
        assert_eq!(
            (h.bf16_dense_tflops, h.bandwidth_bytes_per_sec),
            (989.0, 3.35e12)
        );
        let i = h.of_profile("3g.40gb").unwrap();
        assert!((i.bf16_dense_tflops - 989.0 * 60.0 / 132.0).abs() < 1e-9);
        assert!((i.bandwidth_bytes_per_sec - 1.675e12).abs() < 1.0);
        assert_eq!(i.sms, 60);
        assert!(h.of_profile("9g.999gb").is_none());
    }

    use super::*;

    #[test]
    fn nvml_and_dcgm_names_match() {
        let cases = [
            ("NVIDIA A100-SXM4-40GB", "a100-40-sxm"),
            ("NVIDIA A100-SXM4-80GB", "a100-80-sxm"),
            ("NVIDIA A100-PCIE-40GB", "a100-40-pcie"),
            ("NVIDIA A100 80GB PCIe", "a100-80-pcie"),
            ("NVIDIA H100 80GB HBM3", "h100-sxm"),
            ("NVIDIA H100 PCIe", "h100-pcie"),
            ("NVIDIA H100 NVL", "h100-nvl"),
            ("NVIDIA H200", "h200-sxm"),
            ("NVIDIA H200 NVL", "h200-nvl"),
            ("NVIDIA GH200 480GB", "gh200"),
            ("NVIDIA GH200 144G HBM3e", "gh200"),
            ("NVIDIA B200", "b200"),
            ("NVIDIA L4", "l4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA A10", "a10"),
            ("NVIDIA A30", "a30"),
            ("Tesla T4", "t4"),
            ("Tesla-T4", "t4"),
            ("h100-sxm", "h100-sxm"),
        ];
        for (name, key) in cases {
            assert_eq!(lookup(name).map(|s| s.key), Some(key), "{name}");
        }
        assert!(lookup("NVIDIA RTX 4000 Ada Generation").is_none());
        assert!(lookup("NVIDIA L40").is_none());
    }

    #[test]
    fn peaks_agree_with_clock_times_sms() {
        // dense BF16 = SMs × FLOP/clk/SM × f_ref, within 1 %.
        let per_sm = [
            ("a100-80-sxm", 2048.0),
            ("h100-sxm", 4096.0),
            ("h100-pcie", 4096.0),
            ("h100-nvl", 4096.0),
            ("b200", 8192.0),
            ("l4", 1024.0),
            ("l40s", 1024.0),
            ("t4", 1024.0),
        ];
        for (key, flop) in per_sm {
            let s = by_key(key).unwrap();
            let derived = f64::from(s.sms) * flop * s.f_ref_mhz * 1e6 / 1e12;
            assert!(
                (derived / s.bf16_dense_tflops - 1.0).abs() < 0.01,
                "{key}: {derived}"
            );
        }
        let h = by_key("h100-sxm").unwrap();
        assert!((h.ridge_bf16() - 295.2).abs() < 0.5);
    }

    /// Every model's datasheet figures, typed in from the published sources and not from
    /// the catalog: a wrong catalog entry moves every result that reads it, and the tests
    /// that take their expected values from the catalog with it, so this table is where
    /// one is caught. From NVIDIA's datasheets as tabulated in the counter-science
    /// reference (§4.1: SMs, dense BF16/FP16 tensor and FP8 TFLOP/s, FP32 TFLOP/s, memory
    /// GB, bandwidth TB/s, maximum power W, and the clock the BF16 peak implies); A30, T4
    /// and GH200, which that table lacks, from their NVIDIA datasheets (A30: 165 dense
    /// BF16, 10.3 FP32, 24 GB at 933 GB/s, 165 W; T4: 65 FP16 tensor, 8.1 FP32, 16 GB at
    /// 320 GB/s, 70 W; GH200: 96 GB at 4 TB/s, the H100 SXM's GPU). A power the datasheet
    /// gives as a range (H100 PCIe 300–350 W, H100 NVL 350–400 W, GH200's module 450–1000 W)
    /// is held to it; A10G's, unpublished, is not checked.
    #[test]
    fn every_model_has_its_datasheet_figures() {
        #[rustfmt::skip]
        // key, SMs, BF16, FP8, FP32, memory GB, TB/s, power range W, reference clock MHz.
        type Sheet = (&'static str, u32, f64, Option<f64>, f64, u64, f64, (f64, f64), f64);
        let sheets: [Sheet; 17] = [
            (
                "a100-40-pcie",
                108,
                312.0,
                None,
                19.5,
                40,
                1.555,
                (250.0, 250.0),
                1410.0,
            ),
            (
                "a100-80-pcie",
                108,
                312.0,
                None,
                19.5,
                80,
                1.935,
                (300.0, 300.0),
                1410.0,
            ),
            (
                "a100-40-sxm",
                108,
                312.0,
                None,
                19.5,
                40,
                1.555,
                (400.0, 400.0),
                1410.0,
            ),
            (
                "a100-80-sxm",
                108,
                312.0,
                None,
                19.5,
                80,
                2.039,
                (400.0, 400.0),
                1410.0,
            ),
            (
                "h100-sxm",
                132,
                989.0,
                Some(1979.0),
                67.0,
                80,
                3.35,
                (700.0, 700.0),
                1830.0,
            ),
            (
                "h100-pcie",
                114,
                756.0,
                Some(1513.0),
                51.0,
                80,
                2.0,
                (300.0, 350.0),
                1619.0,
            ),
            (
                "h100-nvl",
                132,
                835.0,
                Some(1671.0),
                60.0,
                94,
                3.9,
                (350.0, 400.0),
                1544.0,
            ),
            (
                "h200-sxm",
                132,
                989.0,
                Some(1979.0),
                67.0,
                141,
                4.8,
                (700.0, 700.0),
                1830.0,
            ),
            (
                "h200-nvl",
                132,
                835.0,
                Some(1671.0),
                60.0,
                141,
                4.8,
                (600.0, 600.0),
                1544.0,
            ),
            (
                "gh200",
                132,
                989.0,
                Some(1979.0),
                67.0,
                96,
                4.0,
                (450.0, 1000.0),
                1830.0,
            ),
            (
                "b200",
                148,
                2250.0,
                Some(4500.0),
                75.0,
                180,
                8.0,
                (1000.0, 1000.0),
                1856.0,
            ),
            (
                "l4",
                58,
                121.0,
                Some(242.0),
                30.3,
                24,
                0.300,
                (72.0, 72.0),
                2037.0,
            ),
            (
                "l40s",
                142,
                362.0,
                Some(733.0),
                91.6,
                48,
                0.864,
                (350.0, 350.0),
                2490.0,
            ),
            (
                "a10",
                72,
                125.0,
                None,
                31.2,
                24,
                0.600,
                (150.0, 150.0),
                1695.0,
            ),
            (
                "a10g",
                80,
                70.0,
                None,
                35.0,
                24,
                0.600,
                (0.0, f64::INFINITY),
                1710.0,
            ),
            (
                "a30",
                56,
                165.0,
                None,
                10.3,
                24,
                0.933,
                (165.0, 165.0),
                1440.0,
            ),
            ("t4", 40, 65.0, None, 8.1, 16, 0.320, (70.0, 70.0), 1590.0),
        ];
        assert_eq!(
            sheets.len(),
            CATALOG.len(),
            "a model without its datasheet row"
        );
        for (key, sms, bf16, fp8, fp32, gb, tbs, (p_lo, p_hi), f_ref) in sheets {
            let s = by_key(key).unwrap_or_else(|| panic!("{key} is not in the catalog"));
            assert_eq!(
                (
                    s.sms,
                    s.bf16_dense_tflops,
                    s.fp8_dense_tflops,
                    s.fp32_tflops
                ),
                (sms, bf16, fp8, fp32),
                "{key}"
            );
            assert_eq!(s.memory_bytes, gb * 1_000_000_000, "{key}");
            assert!(
                (s.bandwidth_bytes_per_sec - tbs * 1e12).abs() < 1.0,
                "{key}"
            );
            assert!((p_lo..=p_hi).contains(&s.max_power_watts), "{key}");
            assert_eq!(s.f_ref_mhz, f_ref, "{key}");
        }
        // A MIG profile's usable memory as an H100 80GB lists it (`nvidia-smi mig -lgip`):
        // 1g.10gb 9.75 GiB (9.62 under some drivers; 9.50 GiB is the A100's), 1g.20gb and
        // 2g.20gb 19.62, 3g.40gb and 4g.40gb 39.50, 7g.80gb 79.25.
        let h = by_key("h100-sxm").unwrap();
        let gib = |p: &str| {
            h.mig.iter().find(|m| m.name == p).unwrap().memory_bytes as f64 / 1073741824.0
        };
        for (p, want) in [
            ("1g.10gb", 9.75),
            ("1g.20gb", 19.625),
            ("2g.20gb", 19.625),
            ("3g.40gb", 39.5),
            ("4g.40gb", 39.5),
            ("7g.80gb", 79.25),
        ] {
            assert_eq!(gib(p), want, "{p}");
        }
    }

    #[test]
    fn bounds_are_at_least_the_datasheet_figures() {
        for s in CATALOG {
            assert!(s.max_sm_clock_mhz >= s.f_ref_mhz, "{}", s.key);
            assert!(s.max_memory_bytes >= s.memory_bytes, "{}", s.key);
        }
        assert_eq!(by_key("gh200").unwrap().max_memory_bytes, 144 * GB);
    }

    #[test]
    fn mig_profiles_per_model() {
        let sms = |key: &str, profile: &str| {
            by_key(key)
                .unwrap()
                .mig
                .iter()
                .find(|p| p.name == profile)
                .map(|p| p.sms)
        };
        assert_eq!(sms("h100-sxm", "1g.10gb"), Some(16));
        assert_eq!(sms("h100-sxm", "1g.20gb"), Some(26));
        assert_eq!(sms("h100-sxm", "7g.80gb"), Some(132));
        assert_eq!(sms("h100-pcie", "1g.20gb"), Some(14));
        assert_eq!(sms("h100-pcie", "3g.40gb"), Some(46));
        assert_eq!(sms("h100-pcie", "7g.80gb"), Some(114));
        for spec in CATALOG {
            for p in spec.mig {
                assert!(p.sms <= spec.sms, "{} {}", spec.key, p.name);
            }
            // The full profile has every SM, except on A100 (98 of 108 in 7g).
            if let Some(full) = spec.mig.iter().max_by_key(|p| p.compute_slices)
                && !spec.key.starts_with("a100")
                && spec.key != "a30"
            {
                assert_eq!(full.sms, spec.sms, "{}", spec.key);
            }
        }
        assert_eq!(lookup("NVIDIA GH200 480GB").unwrap().key, "gh200");
        assert_ne!(lookup("NVIDIA GH200 480GB").unwrap().key, "h200-sxm");
    }
}
