//! Time in the ledger: the UTC hours its figures are kept by, a figure
//! spread over the hours of the interval it accrued in, and a day's name.

/// An hour, in milliseconds.
pub const HOUR_MS: u64 = 3_600_000;
/// A day, in milliseconds.
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// The start of the UTC hour holding `at_ms`.
pub fn hour_of(at_ms: u64) -> u64 {
    at_ms - at_ms % HOUR_MS
}

/// The hours `[from_ms, to_ms)` touches, each with how many of its
/// milliseconds lie in the interval; an empty interval is the hour of
/// `to_ms` with weight 0.
pub fn hours(from_ms: u64, to_ms: u64) -> Vec<(u64, u64)> {
    if from_ms >= to_ms {
        return vec![(hour_of(to_ms), 0)];
    }
    let mut hours = Vec::new();
    let mut at = from_ms;
    while at < to_ms {
        let hour = hour_of(at);
        let end = (hour + HOUR_MS).min(to_ms);
        hours.push((hour, end - at));
        at = end;
    }
    hours
}

/// `amount` spread over `hours` in proportion to their weights, whole
/// units, the rounding left in the last hour (all of it there when no hour
/// has weight): the parts always add up to `amount`.
pub fn spread(amount: u64, hours: &[(u64, u64)]) -> Vec<u64> {
    let total: u128 = hours.iter().map(|&(_, weight)| u128::from(weight)).sum();
    let mut parts = Vec::with_capacity(hours.len());
    let mut given = 0u64;
    for (index, &(_, weight)) in hours.iter().enumerate() {
        let part = if index + 1 == hours.len() {
            amount - given
        } else {
            (u128::from(amount) * u128::from(weight))
                .checked_div(total)
                .and_then(|part| u64::try_from(part).ok())
                .unwrap_or(0)
        };
        given += part;
        parts.push(part);
    }
    parts
}

/// The UTC day holding `at_ms`, as `YYYY-MM-DD`.
pub fn day_name(at_ms: u64) -> String {
    let days = i64::try_from(at_ms / DAY_MS).unwrap_or(0);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01),
/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_cut_at_each_hour() {
        let from = 2 * HOUR_MS - 1_000;
        assert_eq!(
            hours(from, 3 * HOUR_MS + 500),
            vec![(HOUR_MS, 1_000), (2 * HOUR_MS, HOUR_MS), (3 * HOUR_MS, 500)]
        );
        assert_eq!(hours(5_000, 5_000), vec![(0, 0)]);
        assert_eq!(hours(9_000, 5_000), vec![(0, 0)]);
    }

    #[test]
    fn a_spread_adds_up_to_the_whole() {
        let cut = hours(HOUR_MS - 1_000, HOUR_MS + 3_000);
        assert_eq!(spread(4_000, &cut), vec![1_000, 3_000]);
        assert_eq!(spread(7, &cut), vec![1, 6]);
        assert_eq!(
            spread(u64::MAX, &cut)
                .iter()
                .map(|&p| u128::from(p))
                .sum::<u128>(),
            u128::from(u64::MAX)
        );
        assert_eq!(spread(9, &[(0, 0)]), vec![9]);
    }

    #[test]
    fn days_are_named_in_utc() {
        assert_eq!(day_name(0), "1970-01-01");
        // 2024-02-29T23:59:59.999Z and the next millisecond.
        assert_eq!(day_name(1_709_251_199_999), "2024-02-29");
        assert_eq!(day_name(1_709_251_200_000), "2024-03-01");
        assert_eq!(day_name(4_102_444_800_000), "2100-01-01");
    }
}
