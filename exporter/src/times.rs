//! Times as numbers and as text: milliseconds since the epoch of a wall time, and RFC 3339 to
//! the second, for the history's messages and the report.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch of a wall time (0 before 1970).
#[must_use]
pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The last second RFC 3339 writes (9999-12-31T23:59:59Z), in milliseconds since the epoch.
const RFC3339_LAST_MS: i64 = 253_402_300_799_000;

/// A time in milliseconds since the epoch as RFC 3339, to the second; one before the epoch
/// or past the year 9999 (a server's answer can say anything) as its nearest bound.
#[must_use]
pub(crate) fn rfc3339(ms: i64) -> String {
    let ms = u64::try_from(ms.clamp(0, RFC3339_LAST_MS)).unwrap_or(0);
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
