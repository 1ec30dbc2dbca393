//! `report --by … --focus FILE`: the showback as a FOCUS 1.2 cost and usage CSV (FinOps
//! Open Cost and Usage Specification), one `Usage` row per GPU model, group and period (the
//! whole window without `--every`, every group), and one per model and period for the
//! capacity no pod held (`x_Group` `__idle__`, as OpenCost names it). A row holds one
//! model's GPU-hours, so it has one unit price: `ListUnitPrice` × `PricingQuantity` is its
//! `ListCost`, and its `SkuId` is the model. A showback is no invoice: the costs are the
//! GPU-hours at the prices given, so `BilledCost`, `EffectiveCost`, `ListCost` and
//! `ContractedCost` are the same figure; the rows' `BilledCost` add up to the groups' and
//! the unallocated cost. truthscale's own figures are in `x_` columns, as FOCUS asks of a
//! column it does not define.

use super::opencost::{ALLOCATION_UNKNOWN, Bounds, IDLE, periods};
use super::showback::By;
use std::io::Write;
use truthscale_core::showback::{GroupHours, ModelPart, Period};

/// The columns: FOCUS 1.2's, then truthscale's.
const HEADER: &str = "BillingAccountId,BillingAccountName,BillingCurrency,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,ChargeClass,ChargeDescription,ChargeFrequency,BilledCost,EffectiveCost,ListCost,ListUnitPrice,ContractedCost,ContractedUnitPrice,ConsumedQuantity,ConsumedUnit,PricingQuantity,PricingUnit,PricingCategory,InvoiceId,InvoiceIssuerName,ProviderName,PublisherName,ServiceCategory,ServiceSubcategory,ServiceName,ResourceId,ResourceName,ResourceType,RegionId,RegionName,AvailabilityZone,SkuId,SkuPriceId,SubAccountId,SubAccountName,CommitmentDiscountCategory,CommitmentDiscountId,CommitmentDiscountName,CommitmentDiscountStatus,CommitmentDiscountType,Tags,x_By,x_Group,x_Workloads,x_UsedGpuHours,x_IdleGpuHours,x_IdleCost,x_UnmeasuredGpuHours,x_UseUnknownGpuHours,x_UnavailableGpuHours,x_UnavailableCost,x_BusyGpuHours,x_EffectiveComputeGpuHours,x_BusyMeasuredGpuHours,x_EffectiveComputeMeasuredGpuHours,x_HealthMeasuredGpuHours,x_OverallocatedGpuHours,x_AssumedShareGpuHours,x_EnergyKwh,x_EnergyCost,x_EnergyMeasuredGpuHours";

/// The account every row is in: the showback, not a cloud bill.
const ACCOUNT: &str = "truthscale-showback";
/// Who issues the figures.
const ISSUER: &str = "truthscale";
/// The unit of every quantity.
const UNIT: &str = "GPU-Hours";

/// What FOCUS needs beyond the showback: the currency of the prices.
#[derive(Debug, Clone)]
pub(crate) struct FocusArgs {
    /// ISO 4217 code of the prices' currency (`--currency`).
    pub currency: String,
}

/// A currency code as ISO 4217 writes it: three capital letters.
///
/// # Errors
/// Anything else.
pub(crate) fn currency(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?}: give an ISO 4217 currency code (USD, EUR)"))
    }
}

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(x: f64) -> String {
    format!("{x:.6}")
}

/// One row: what is charged, its cost, and truthscale's figures (`g`: `None` for the
/// capacity no pod held).
struct Row<'a> {
    group: &'a str,
    description: String,
    hours: f64,
    cost: f64,
    g: Option<&'a GroupHours>,
    /// `None` where no health field was read (unknown, never 0).
    unavailable: Option<f64>,
    /// The GPU-hours `unavailable` was judged over (`None`: allocation unknown, nothing read).
    health_measured: Option<f64>,
    /// On the idle row: the GPU-hours granted beyond whole GPUs (pods' shares of one GPU
    /// adding up to more than one), which the groups' rows bill on top of the fleet's.
    overallocated: Option<f64>,
    /// Of its GPU-hours, those charged by an assumed share (a MIG instance of an unknown
    /// profile, or what its GPU had left): an assumption, not a reading.
    assumed: Option<f64>,
    /// Its share of the GPUs' measured energy, kWh, what it cost at
    /// `--energy-price-per-kwh` (`None`: no power read, no price), never in `BilledCost`,
    /// which is the GPU-hours' alone; and the GPU-hours that energy was measured over
    /// (`None`: none of the row's GPUs read).
    energy: (Option<f64>, Option<f64>, Option<f64>),
    /// Any of its GPU-hours of a simulated GPU.
    simulated: bool,
}

/// Writes `row` of one model's period `b` (`rows`: the groups' name, the model and its
/// price) in a window `window`.
fn write_row(
    out: &mut impl Write,
    rows: &Rows<'_>,
    args: &FocusArgs,
    window: &Bounds,
    b: &Bounds,
    r: &Row<'_>,
) -> std::io::Result<()> {
    let by = rows.by;
    let mut tags = serde_json::json!({ "truthscale.by": by, "truthscale.group": r.group });
    if r.simulated {
        // Simulated data says so: a demo's figures, never a bill.
        tags["truthscale.simulated"] = "true".into();
    }
    let tags = tags.to_string();
    let (cost, hours) = (num(r.cost), num(r.hours));
    let opt = |f: fn(&GroupHours) -> f64| r.g.map_or_else(String::new, |g| num(f(g)));
    let measured =
        |f: fn(&GroupHours) -> Option<f64>| r.g.and_then(f).map_or_else(String::new, num);
    let cost_of = |f: fn(&truthscale_core::showback::GroupCost) -> f64| {
        r.g.and_then(|g| g.cost.as_ref())
            .map_or_else(String::new, |c| num(f(c)))
    };
    let account = if r.g.is_some() { r.group } else { "" };
    writeln!(
        out,
        "{ACCOUNT},,{cur},{ws},{we},{ps},{pe},Usage,,{desc},Usage-Based,{cost},{cost},{cost},{price},{cost},{price},{hours},{UNIT},{hours},{UNIT},Standard,,{ISSUER},{ISSUER},{ISSUER},Compute,Containers,GPU,,,,,,,{sku},{sku},{acct},{acct},,,,,,{tags},{by},{group},{wl},{used},{idle},{idle_cost},{unm},{unk},{down},{down_cost},{busy},{ecf},{busy_m},{ecf_m},{health_m},{over},{assumed},{kwh},{kwh_cost},{kwh_m}",
        cur = args.currency,
        ws = window.start,
        we = window.end,
        ps = b.start,
        pe = b.end,
        desc = field(&r.description),
        price = num(rows.price),
        sku = field(rows.sku),
        acct = field(account),
        tags = field(&tags),
        by = field(by),
        group = field(r.group),
        wl = r.g.map_or_else(String::new, |g| g.workloads.to_string()),
        used = opt(|g| g.used_gpu_hours),
        idle = opt(|g| g.idle_gpu_hours),
        idle_cost = cost_of(|c| c.idle),
        unm = opt(|g| g.unmeasured_gpu_hours),
        unk = opt(|g| g.use_unknown_gpu_hours),
        down = r.unavailable.map_or_else(String::new, num),
        down_cost =
            r.g.and_then(|g| g.cost.as_ref())
                .and_then(|c| c.unavailable)
                .map_or_else(String::new, num),
        busy = measured(|g| g.busy_gpu_hours),
        ecf = measured(|g| g.effective_compute_gpu_hours),
        busy_m = opt(|g| g.busy_measured_gpu_hours),
        ecf_m = opt(|g| g.effective_compute_measured_gpu_hours),
        health_m = r.health_measured.map_or_else(String::new, num),
        over = r.overallocated.map_or_else(String::new, num),
        assumed = r.assumed.map_or_else(String::new, num),
        kwh = r.energy.0.map_or_else(String::new, num),
        kwh_cost = r.energy.1.map_or_else(String::new, num),
        kwh_m = r.energy.2.map_or_else(String::new, num),
    )
}

/// The SKU of a model's rows: the model as reported.
fn sku(part: &ModelPart) -> &str {
    part.model.as_deref().unwrap_or("(model not reported)")
}

/// Writes the FOCUS CSV of the showback split by model, `parts` (every group).
///
/// # Errors
/// A model has no price (FOCUS has no row without a cost, and a row's unit price is its
/// model's); writing fails.
pub(crate) fn write(
    out: &mut impl Write,
    parts: &[ModelPart],
    by: &By,
    args: &FocusArgs,
    start_ms: i64,
    step_seconds: f64,
) -> anyhow::Result<()> {
    let by_name = by.describe();
    let each: Vec<Vec<(&Period, Bounds)>> = parts
        .iter()
        .map(|p| periods(&p.showback, start_ms, step_seconds))
        .collect();
    let prices = parts
        .iter()
        .map(|p| {
            p.price.ok_or_else(|| {
                anyhow::anyhow!(
                    "--focus needs a price of every GPU model (a row's unit price is its model's): none for {}; give --cost-per-gpu-hour, or --gpu-hour-price \"{}=PRICE\"",
                    sku(p),
                    sku(p)
                )
            })
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    // Every part has the same periods.
    let all = each.first().map_or(&[][..], Vec::as_slice);
    let window = Bounds {
        start: all
            .first()
            .map(|(_, b)| b.start.clone())
            .unwrap_or_default(),
        end: all.last().map(|(_, b)| b.end.clone()).unwrap_or_default(),
        hours: 0.0,
    };
    writeln!(out, "{HEADER}")?;
    for k in 0..all.len() {
        for ((part, periods), price) in parts.iter().zip(&each).zip(&prices) {
            let (p, b) = &periods[k];
            let rows = Rows {
                by: &by_name,
                sku: sku(part),
                price: *price,
            };
            rows.write(out, args, &window, b, p)?;
        }
    }
    Ok(())
}

/// What every row of one model's period shares: the groups' name, the model and its price.
struct Rows<'a> {
    by: &'a str,
    sku: &'a str,
    price: f64,
}

impl Rows<'_> {
    /// The rows of one model's period `p`: its groups', the capacity no pod held (always),
    /// and the GPU-hours whose allocation is unknown (where any).
    fn write(
        &self,
        out: &mut impl Write,
        args: &FocusArgs,
        window: &Bounds,
        b: &Bounds,
        p: &Period,
    ) -> anyhow::Result<()> {
        // Each part's GPU-hours have its model's price: a cost is there whenever the price is.
        let cost = |c: Option<f64>| {
            c.ok_or_else(|| anyhow::anyhow!("--focus: a row of {} has no cost", self.sku))
        };
        for g in &p.groups {
            let row = Row {
                group: &g.group,
                description: format!(
                    "{} GPU-hours allocated to {} {}",
                    self.sku, self.by, g.group
                ),
                hours: g.allocated_gpu_hours,
                cost: cost(g.cost.as_ref().map(|c| c.allocated))?,
                g: Some(g),
                unavailable: g.unavailable_gpu_hours,
                health_measured: Some(g.health_measured_gpu_hours),
                overallocated: None,
                assumed: Some(g.assumed_share_gpu_hours),
                energy: (
                    g.energy_kwh,
                    g.energy_cost,
                    Some(g.energy_measured_gpu_hours),
                ),
                simulated: g.simulated,
            };
            write_row(out, self, args, window, b, &row)?;
        }
        let unheld = [
            (
                IDLE,
                "GPU-hours no pod held (idle capacity)",
                (p.unallocated_gpu_hours, p.unallocated_cost),
                (
                    p.unallocated_unavailable_gpu_hours,
                    Some(p.unallocated_health_measured_gpu_hours),
                ),
                p.unallocated_simulated,
            ),
            (
                ALLOCATION_UNKNOWN,
                "GPU-hours with nothing of the GPU read and no holder named (allocation unknown)",
                (p.allocation_unknown_gpu_hours, p.allocation_unknown_cost),
                (None, None),
                p.allocation_unknown_simulated,
            ),
        ];
        for (k, (group, description, (hours, c), (unavailable, health_measured), simulated)) in
            unheld.into_iter().enumerate()
        {
            if k > 0 && hours == 0.0 {
                continue;
            }
            let row = Row {
                group,
                description: format!("{} {description}", self.sku),
                hours,
                cost: cost(c)?,
                g: None,
                unavailable,
                health_measured,
                overallocated: (group == IDLE).then_some(p.overallocated_gpu_hours),
                assumed: (group == IDLE).then_some(p.unallocated_assumed_share_gpu_hours),
                energy: unheld_energy(p, group),
                simulated,
            };
            write_row(out, self, args, window, b, &row)?;
        }
        Ok(())
    }
}

/// The energy of the unheld row `group` of period `p`: on `__idle__`, the energy no pod held
/// (kWh, its cost, the GPU-hours it covers); nothing of a GPU of unknown allocation was read,
/// so no energy either.
fn unheld_energy(p: &Period, group: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
    match (&p.energy, group == IDLE) {
        (Some(e), true) => (
            Some(e.unallocated_kwh),
            e.unallocated_cost,
            Some(e.unallocated_measured_gpu_hours),
        ),
        _ => (None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::showback::Showback;

    /// `s` as the one part of a fleet of H100s at `price`.
    fn h100(s: Showback, price: Option<f64>) -> Vec<ModelPart> {
        vec![ModelPart {
            model: Some("NVIDIA H100 80GB HBM3".into()),
            price,
            showback: s,
        }]
    }

    #[test]
    fn currencies_are_three_capitals() {
        assert_eq!(currency(" EUR "), Ok("EUR".to_string()));
        assert!(currency("usd").is_err());
        assert!(currency("EURO").is_err());
    }

    /// Every row has as many fields as the header.
    fn usd() -> FocusArgs {
        FocusArgs {
            currency: "USD".into(),
        }
    }

    /// The FOCUS CSV of `s` by namespace, in USD.
    fn focus_text(s: &Showback) -> String {
        let mut out = Vec::new();
        write(
            &mut out,
            &h100(s.clone(), Some(2.0)),
            &By::Namespace,
            &usd(),
            0,
            60.0,
        )
        .expect("written");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn rows_have_every_column() {
        let s = Showback {
            total: truthscale_core::showback::Period {
                groups: vec![GroupHours {
                    group: "a,b".into(),
                    cost: Some(Default::default()),
                    ..GroupHours::default()
                }],
                unallocated_cost: Some(1.0),
                ..Default::default()
            },
            ..Showback::default()
        };
        let text = focus_text(&s);
        let columns = HEADER.split(',').count();
        let mut rdr = text.lines();
        assert_eq!(rdr.next(), Some(HEADER));
        assert_eq!(text.lines().count(), 3, "the group and __idle__");
        for line in rdr {
            // Quoted fields hold commas: count outside quotes.
            let mut quoted = false;
            let n = 1 + line
                .chars()
                .filter(|c| {
                    if *c == '"' {
                        quoted = !quoted;
                    }
                    *c == ',' && !quoted
                })
                .count();
            assert_eq!(n, columns, "{line}");
        }
        let e = write(
            &mut Vec::new(),
            &h100(s, None),
            &By::Namespace,
            &usd(),
            0,
            60.0,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("none for NVIDIA H100 80GB HBM3; give --cost-per-gpu-hour"),
            "{e}"
        );
    }

    /// Simulated data says so: a row with any GPU-hour of a simulated GPU carries the tag
    /// `truthscale.simulated`, a row of real GPUs alone does not.
    #[test]
    fn simulated_rows_are_tagged() {
        let group = |name: &str, simulated| GroupHours {
            group: name.into(),
            cost: Some(Default::default()),
            simulated,
            ..GroupHours::default()
        };
        let s = Showback {
            total: truthscale_core::showback::Period {
                groups: vec![group("demo", true), group("ml", false)],
                unallocated_cost: Some(1.0),
                unallocated_simulated: true,
                ..Default::default()
            },
            ..Showback::default()
        };
        let text = focus_text(&s);
        let tag = r#""{""truthscale.by"":""namespace"",""truthscale.group"":""GROUP"",""truthscale.simulated"":""true""}""#;
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert!(
            rows[0].contains(&tag.replace("GROUP", "demo")),
            "{}",
            rows[0]
        );
        assert!(!rows[1].contains("truthscale.simulated"), "{}", rows[1]);
        assert!(rows[2].contains(&tag.replace("GROUP", IDLE)), "{}", rows[2]);
    }

    /// Known inputs, each cost worked out by hand: `ml` held 4 GPU-hours at $2 (8), and 1
    /// GPU-hour no pod held (2); the rows' BilledCost add up to the fleet's 10.
    #[test]
    fn the_costs_are_the_hours_at_the_price() {
        let s = Showback {
            total: truthscale_core::showback::Period {
                steps: 120,
                groups: vec![GroupHours {
                    group: "ml".into(),
                    workloads: 2,
                    allocated_gpu_hours: 4.0,
                    used_gpu_hours: 3.0,
                    assumed_share_gpu_hours: 0.5,
                    cost: Some(truthscale_core::showback::GroupCost {
                        allocated: 8.0,
                        ..Default::default()
                    }),
                    ..GroupHours::default()
                }],
                unallocated_gpu_hours: 1.0,
                unallocated_cost: Some(2.0),
                unallocated_assumed_share_gpu_hours: 0.25,
                ..Default::default()
            },
            ..Showback::default()
        };
        let args = FocusArgs {
            currency: "EUR".into(),
        };
        let mut out = Vec::new();
        // 2025-01-06T00:00:00Z, 120 steps of 60 s.
        let parts = h100(s, Some(2.0));
        write(
            &mut out,
            &parts,
            &By::Namespace,
            &args,
            1_736_121_600_000,
            60.0,
        )
        .expect("written");
        let text = String::from_utf8(out).expect("UTF-8");
        let header: Vec<&str> = HEADER.split(',').collect();
        // Split at the commas outside quotes (Tags holds some).
        let split = |l: &str| -> Vec<String> {
            let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
            for c in l.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ',' if !quoted => fields.push(std::mem::take(&mut cur)),
                    _ => cur.push(c),
                }
            }
            fields.push(cur);
            fields
        };
        let rows: Vec<Vec<String>> = text.lines().skip(1).map(split).collect();
        let col = |row: &[String], name: &str| -> String {
            let i = header.iter().position(|h| *h == name).expect(name);
            row[i].to_string()
        };
        let (ml, idle) = (&rows[0], &rows[1]);
        assert_eq!(col(ml, "x_Group"), "ml");
        assert_eq!(col(ml, "BilledCost"), "8.000000");
        assert_eq!(col(ml, "EffectiveCost"), "8.000000");
        assert_eq!(col(ml, "ConsumedQuantity"), "4.000000");
        assert_eq!(col(ml, "x_UsedGpuHours"), "3.000000");
        assert_eq!(col(ml, "SubAccountId"), "ml");
        assert_eq!(col(ml, "BillingCurrency"), "EUR");
        assert_eq!(col(ml, "ChargePeriodStart"), "2025-01-06T00:00:00Z");
        assert_eq!(col(ml, "ChargePeriodEnd"), "2025-01-06T02:00:00Z");
        assert_eq!(col(ml, "InvoiceId"), "", "no invoice: null");
        assert_eq!(col(idle, "x_Group"), IDLE);
        assert_eq!(col(idle, "BilledCost"), "2.000000");
        assert_eq!(col(idle, "ConsumedQuantity"), "1.000000");
        assert_eq!(col(idle, "SubAccountId"), "");
        assert_eq!(col(idle, "x_UsedGpuHours"), "", "unknown: empty, not 0");
        assert_eq!(col(idle, "x_OverallocatedGpuHours"), "0.000000");
        // GPU-hours charged by an assumed MIG share (an instance of an unknown profile), and
        // what was left of such GPUs: named on their rows.
        assert_eq!(col(ml, "x_AssumedShareGpuHours"), "0.500000");
        assert_eq!(col(idle, "x_AssumedShareGpuHours"), "0.250000");
        assert_eq!(
            col(ml, "x_OverallocatedGpuHours"),
            "",
            "a fleet figure, on the idle row"
        );
        // One model a row: its unit price and SKU, and ListUnitPrice × PricingQuantity =
        // ListCost (FOCUS 1.2: not null on a Usage row, and that product).
        for r in &rows {
            assert_eq!(col(r, "ListUnitPrice"), "2.000000");
            assert_eq!(col(r, "ContractedUnitPrice"), "2.000000");
            assert_eq!(col(r, "SkuId"), "NVIDIA H100 80GB HBM3");
            assert_eq!(col(r, "SkuPriceId"), "NVIDIA H100 80GB HBM3");
            let f = |name: &str| col(r, name).parse::<f64>().unwrap();
            assert!((f("ListUnitPrice") * f("PricingQuantity") - f("ListCost")).abs() < 1e-9);
        }
        assert_eq!(
            col(ml, "ChargeDescription"),
            "NVIDIA H100 80GB HBM3 GPU-hours allocated to namespace ml"
        );
        let billed: f64 = rows
            .iter()
            .map(|r| col(r, "BilledCost").parse::<f64>().unwrap())
            .sum();
        assert!((billed - 10.0).abs() < 1e-9, "{billed}");
    }

    /// Two pods granted 0.75 and 0.5 of one GPU for 2 h at 2 a GPU-hour: 1.5 and 1.0
    /// GPU-hours billed, 3 + 2, on a fleet of 2 GPU-hours (4). The idle row names the 0.5
    /// GPU-hours granted beyond the GPU, so the rows less it at the price are the fleet's.
    #[test]
    fn hours_granted_beyond_a_gpu_are_named_on_the_idle_row() {
        let group = |name: &str, hours: f64| GroupHours {
            group: name.into(),
            allocated_gpu_hours: hours,
            cost: Some(truthscale_core::showback::GroupCost {
                allocated: 2.0 * hours,
                ..Default::default()
            }),
            ..GroupHours::default()
        };
        let s = Showback {
            total: truthscale_core::showback::Period {
                steps: 120,
                groups: vec![group("a", 1.5), group("b", 1.0)],
                unallocated_cost: Some(0.0),
                fleet_gpu_hours: 2.0,
                overallocated_gpu_hours: 0.5,
                ..Default::default()
            },
            ..Showback::default()
        };
        let text = focus_text(&s);
        let header: Vec<&str> = HEADER.split(',').collect();
        let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| {
                l.rsplitn(header.len() - at("Tags"), ',')
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        // The columns after Tags, last first.
        let over = |r: &Vec<&str>| r[header.len() - 1 - at("x_OverallocatedGpuHours")].to_string();
        assert_eq!(over(&rows[2]), "0.500000", "the idle row: {text}");
        assert_eq!(over(&rows[0]), "");
        let billed: f64 = text
            .lines()
            .skip(1)
            .map(|l| {
                l.split(',')
                    .nth(at("BilledCost"))
                    .unwrap()
                    .parse::<f64>()
                    .unwrap()
            })
            .sum();
        assert!((billed - 0.5 * 2.0 - 2.0 * 2.0).abs() < 1e-9, "{billed}");
    }
}
