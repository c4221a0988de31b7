//! Calendar dates of instants, in UTC (certificates' validity, log timestamps), without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Year, month and day (UTC) of a time (Howard Hinnant's `civil_from_days`).
pub fn civil_date(time: SystemTime) -> (i32, u8, u8) {
    let days = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (year_of_era + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

/// An instant as RFC 3339 with microseconds, UTC (zap's ISO 8601 time encoder).
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (year, month, day) = civil_date(time);
    let in_day = since.as_secs() % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60,
        since.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(civil_date(at(0)), (1970, 1, 1));
        assert_eq!(civil_date(at(951_782_400)), (2000, 2, 29));
        assert_eq!(civil_date(at(1_795_651_200)), (2026, 11, 26));
        assert_eq!(rfc3339(at(1_795_651_200) + Duration::from_micros(3_723_000_042)), "2026-11-26T01:02:03.000042Z");
    }
}
