//! When the window holds no GPU series: the newest GPU sample Prometheus has (within
//! [`LOOKBACK`] of the window's end), and a `--since`/`--step` that would reach it.

use super::api::Client;
use super::query::Range;
use super::query::secs;
use crate::times::rfc3339;
use std::time::Duration;

/// How far back from the window's end the newest sample is looked for.
const LOOKBACK: &str = "7d";

/// How long Prometheus looks back for a series' sample at an instant (its
/// `--query.lookback-delta`) where the server does not say: its default, 5 minutes.
const DEFAULT_LOOKBACK_MS: i64 = 300_000;

/// What to say after "no GPU series in the window" ([`hint`]): the newest sample of
/// `selector` is asked, and where there is one, the lookback the server tells it within.
pub(super) fn said(client: &Client, selector: &str, range: Range) -> String {
    let newest = newest_sample(client, selector, range);
    let lookback = match newest {
        Ok(Some(_)) => super::remote::lookback(client).ok(),
        _ => None,
    };
    hint(newest, lookback, range)
}

/// When the newest sample of `selector` (a `{…}` series selector) up to `range.end` was last
/// seen, in milliseconds since the epoch: the last minute of [`LOOKBACK`] at which a series
/// had a sample within Prometheus' lookback, so the sample lies within the lookback before
/// it. `Ok(None)` when there is none within [`LOOKBACK`].
///
/// `timestamp` gives a sample's own time only for a series selector; a GPU's families share
/// every label but their name (its tensor and its DRAM activity), which `timestamp` drops,
/// and Prometheus refuses such a vector ("vector cannot contain metrics with the same
/// labelset"). The name is kept as a label first, and `timestamp` then gives the time it is
/// evaluated at.
///
/// # Errors
/// The question was not answered (the request failed, or the answer holds no time a sample
/// can have), in words: the hint then says so, never that there is no sample.
pub(super) fn newest_sample(
    client: &Client,
    selector: &str,
    range: Range,
) -> Result<Option<i64>, String> {
    let query = format!(
        "max(max_over_time(timestamp(label_replace({selector}, \"name_\", \"$1\", \"__name__\", \"(.+)\"))[{LOOKBACK}:1m]))"
    );
    let end = secs(range.end);
    let data: serde_json::Value = client
        .get("/api/v1/query", &[("query", &query), ("time", &end)])
        .map_err(|e| format!("{e:#}"))?;
    if data["result"].as_array().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    let value = &data["result"][0]["value"][1];
    let seconds: Option<f64> = value.as_str().and_then(|v| v.parse().ok());
    // A sample's time, up to the window's end: anything else is no answer.
    let ms = seconds.map(|s| s * 1000.0);
    match ms {
        Some(ms) if ms.is_finite() && (0.0..=range.end as f64).contains(&ms) => Ok(Some(ms as i64)),
        _ => Err(format!(
            "Prometheus answered {value} for its time, no time a sample up to the window's end can have"
        )),
    }
}

/// What to say after "no GPU series in the window": the newest sample's time, to within
/// `lookback` (the server's, in milliseconds; `None`: it did not say, and its default is
/// taken), and a `--since` (and `--step`) that reaches it; or that there is none.
fn hint(newest: Result<Option<i64>, String>, lookback: Option<i64>, range: Range) -> String {
    let at = match newest {
        Ok(Some(at)) => at,
        Err(why) => {
            return format!(
                "; the newest GPU sample in the {LOOKBACK} before {} could not be asked: {why}",
                rfc3339(range.end)
            );
        }
        Ok(None) => {
            return format!(
                "; Prometheus has no GPU sample in the {LOOKBACK} before {} either: check that it \
             scrapes truthscale or dcgm-exporter (its /targets page) and that the \
             selector matches",
                rfc3339(range.end)
            );
        }
    };
    // The sample lies within Prometheus' lookback before the time it was seen at.
    let seen = at;
    let at = seen.saturating_sub(lookback.unwrap_or(DEFAULT_LOOKBACK_MS));
    let age_ms = range.end.saturating_sub(at).max(0);
    // Round the age up to whole minutes, with a minute's margin.
    let minutes = u64::try_from(age_ms / 60_000 + 2).unwrap_or(u64::MAX);
    let since = humantime::format_duration(Duration::from_secs(minutes * 60));
    let step_s = u64::try_from(range.step / 1000).unwrap_or(15).max(1);
    // A step no longer than a tenth of the window, so that a few steps hold readings.
    let step = humantime::format_duration(Duration::from_secs(step_s.min(minutes * 6).max(1)));
    let lookback = match lookback {
        Some(ms) => seconds(ms).to_string(),
        None => format!(
            "{} unless set otherwise: the server did not say",
            seconds(DEFAULT_LOOKBACK_MS)
        ),
    };
    format!(
        "; the newest GPU sample is between {} and {} (at most {} before the window's end; \
         Prometheus tells it to within its lookback, {lookback}): --since {since} --step \
         {step} reaches it",
        rfc3339(at),
        rfc3339(seen),
        seconds(age_ms)
    )
}

/// `ms` milliseconds as whole seconds in words (`5m`, `3h 30s`).
fn seconds(ms: i64) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`newest_sample`] makes of a server answering `value` for the newest sample's
    /// time, at a window ending 1 780 000 000 s; and the request it sent.
    fn newest_of(value: &str) -> (Result<Option<i64>, String>, String) {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1780000000,"{value}"]}}]}}}}"#
        );
        asked("200 OK", &body)
    }

    /// What [`newest_sample`] makes of a server answering `status` and `body`, and the
    /// request it sent.
    fn asked(status: &str, body: &str) -> (Result<Option<i64>, String>, String) {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (status, body) = (status.to_owned(), body.to_owned());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = vec![0u8; 4096];
            let n = conn.read(&mut request).unwrap();
            write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let client = Client::new(&base, None, Duration::from_secs(5), None).unwrap();
        let range = Range::back_from(1_780_000_000_000, 3_600_000, 15_000);
        let newest = newest_sample(&client, "{__name__=~\"x\"}", range);
        (newest, server.join().unwrap())
    }

    /// A question Prometheus refuses (too many samples for its limit) is said as not
    /// answered, with its error, never as "no GPU sample"; an empty answer is none.
    #[test]
    fn a_refused_question_is_said_never_as_no_sample() {
        let (newest, _) = asked(
            "422 Unprocessable Entity",
            r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}"#,
        );
        let why = newest.unwrap_err();
        assert!(why.contains("would load too many samples"), "{why}");
        let range = Range::back_from(1_780_000_000_000, 3_600_000, 15_000);
        let said = hint(Err(why), None, range);
        assert!(
            said.starts_with(
                "; the newest GPU sample in the 7d before 2026-05-28T20:26:40Z could not be asked: "
            ),
            "{said}"
        );
        assert!(!said.contains("has no GPU sample"), "{said}");
        let (none, _) = asked(
            "200 OK",
            r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        );
        assert_eq!(none, Ok(None));
    }

    /// The newest sample is asked of Prometheus as one instant query at the window's end.
    #[test]
    fn the_newest_sample_is_one_instant_query() {
        let (newest, request) = newest_of("1779989170.5");
        assert_eq!(newest, Ok(Some(1_779_989_170_500)));
        assert!(
            request.starts_with(
                "GET /api/v1/query?query=max(max_over_time(timestamp(label_replace(%7B__name__"
            ),
            "{request}"
        );
        assert!(request.contains("time=1780000000"), "{request}");
    }

    /// A time no sample can have (past the window's end, before the epoch, past what RFC
    /// 3339 writes, not a number) is no answer, and the hint words any time without a panic.
    #[test]
    fn an_impossible_newest_time_is_no_answer() {
        for value in ["1e12", "1780000001", "-1", "-1e300", "1e300", "NaN", "+Inf"] {
            let (newest, _) = newest_of(value);
            assert_eq!(
                newest,
                Err(format!(
                    "Prometheus answered \"{value}\" for its time, no time a sample up to the window's end can have"
                )),
                "{value}"
            );
        }
        let range = Range::back_from(1_780_000_000_000, 3_600_000, 15_000);
        for at in [i64::MIN, -1, i64::MAX] {
            assert!(hint(Ok(Some(at)), None, range).contains("the newest GPU sample is between"));
        }
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(i64::MIN), "1970-01-01T00:00:00Z");
    }

    /// The error says the newest sample's time and a `--since`/`--step` that reaches it, or
    /// that there is none.
    #[test]
    fn no_gpu_series_says_the_newest_sample_and_a_window_that_reaches_it() {
        let end = 1_780_000_000_000;
        let range = Range::back_from(end, 3_600_000, 15_000);
        // Seen 2h 55m 30s before the end: the sample is up to 5 minutes older.
        let seen = end - 3 * 3_600_000 - 30_000 + 300_000;
        assert_eq!(
            hint(Ok(Some(seen)), None, range),
            format!(
                "; the newest GPU sample is between {} and {} (at most 3h 30s before the \
                 window's end; Prometheus tells it to within its lookback, 5m unless set \
                 otherwise: the server did not say): --since 3h 2m --step 15s reaches it",
                rfc3339(end - 3 * 3_600_000 - 30_000),
                rfc3339(seen)
            )
        );
        // A server whose lookback is 10 minutes, as it says: seen 2h 50m 30s before the
        // end, the sample is up to 10 minutes older.
        let seen = end - 3 * 3_600_000 - 30_000 + 600_000;
        assert_eq!(
            hint(Ok(Some(seen)), Some(600_000), range),
            format!(
                "; the newest GPU sample is between {} and {} (at most 3h 30s before the \
                 window's end; Prometheus tells it to within its lookback, 10m): --since \
                 3h 2m --step 15s reaches it",
                rfc3339(end - 3 * 3_600_000 - 30_000),
                rfc3339(seen)
            )
        );
        // Seen at the window's end: the sample is up to 5 minutes before it.
        let range = Range::back_from(end, 3_600_000, 300_000);
        assert!(
            hint(Ok(Some(end)), None, range).ends_with("--since 7m --step 42s reaches it"),
            "{}",
            hint(Ok(Some(end)), None, range)
        );
        assert_eq!(
            hint(Ok(None), None, range),
            format!(
                "; Prometheus has no GPU sample in the 7d before {} either: check that it \
                 scrapes truthscale or dcgm-exporter (its /targets page) and that the \
                 selector matches",
                rfc3339(end)
            )
        );
    }
}
