//! Combining the steps of one point ([`Track::with_steps_per_point`]).

use super::{BANDS, Health, NO_HEALTH, NO_POWER, NO_RATIO, Point, pack, point_mib};

/// The steps of one point being combined ([`Track::with_steps_per_point`]): the means'
/// sums and counts (in ratio units) over the steps that measured them, and the peaks of the
/// rest. A step that measured nothing adds nothing, never a 0.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Combine {
    sat: (u64, u64),
    busy: (u64, u64),
    ecf: (u64, u64),
    power: (u64, u64),
    /// Per band, the highest of the steps' (each band of the point holds at least what
    /// that band held in any of its steps, so no time above a level is lost).
    bands: [Option<u16>; BANDS],
    pipe: Option<u16>,
    dram: Option<u16>,
    mem: Option<u32>,
    /// The worst health of its steps.
    health: Option<Health>,
    /// A step of it held an impossible raw sample: the point is unknown.
    pub(super) impossible: bool,
}

impl Combine {
    pub(super) fn add(&mut self, p: Point) {
        let mean = |acc: &mut (u64, u64), x: Option<u16>| {
            if let Some(x) = x {
                acc.0 += u64::from(x);
                acc.1 += 1;
            }
        };
        mean(&mut self.sat, p.sat());
        mean(&mut self.busy, p.busy());
        mean(&mut self.ecf, p.ecf());
        if let Some(x) = p.power_dw() {
            self.power.0 += u64::from(x);
            self.power.1 += 1;
        }
        for j in 0..BANDS {
            self.raise_band(j, p.band(j));
        }
        self.raise_pipes(p.pipe(), p.dram());
        self.mem = self.mem.max(p.mem());
        self.health = self.health.max(p.health());
    }

    /// Raise band `j`'s saturation.
    pub(super) fn raise_band(&mut self, j: usize, x: Option<u16>) {
        self.bands[j] = self.bands[j].max(x);
    }

    /// Raise the peaks of the busiest pipe and DRAM activity.
    pub(super) fn raise_pipes(&mut self, pipe: Option<u16>, dram: Option<u16>) {
        self.pipe = self.pipe.max(pipe);
        self.dram = self.dram.max(dram);
    }

    pub(super) fn point(&self) -> Point {
        if self.impossible {
            return Point::NONE;
        }
        let mean = |(sum, n): (u64, u64)| {
            (sum + n / 2)
                .checked_div(n)
                .and_then(|m| u16::try_from(m).ok())
                .unwrap_or(NO_RATIO)
        };
        let saturation = mean(self.sat);
        let band = |b: Option<u16>| match b {
            Some(b) if saturation != NO_RATIO => b,
            _ => NO_RATIO,
        };
        Point {
            saturation,
            bands: self.bands.map(band),
            busiest_pipe: self.pipe.unwrap_or(NO_RATIO),
            dram: self.dram.unwrap_or(NO_RATIO),
            busy: mean(self.busy),
            effective_compute: mean(self.ecf),
            memory_health: pack(
                point_mib(self.mem),
                self.health.map_or(NO_HEALTH, Health::rank),
            ),
            power_dw: (self.power.0 + self.power.1 / 2)
                .checked_div(self.power.1)
                .and_then(|m| u16::try_from(m).ok())
                .unwrap_or(NO_POWER),
        }
    }
}
