//! When a certificate is valid: the `validity` field of an X.509
//! certificate, read from its DER without a full X.509 parser (rustls and
//! webpki check validity but do not expose it), and dates as text.
//!
//! Only our own certificate is read here, after webpki has parsed it; a
//! malformed one gives `None`, never a panic.

/// A certificate's validity period, in seconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// `notBefore`.
    pub not_before: i64,
    /// `notAfter`.
    pub not_after: i64,
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const EXPLICIT_VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The validity of the DER certificate `der`.
pub fn of(der: &[u8]) -> Option<Validity> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
    // OPTIONAL, serialNumber, signature, issuer, validity, ... }, ... }
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let (tag, _, mut rest) = tlv(tbs)?;
    if tag == EXPLICIT_VERSION {
        (_, rest) = expect(rest, INTEGER)?;
    }
    let (_signature, rest) = expect(rest, SEQUENCE)?;
    let (_issuer, rest) = expect(rest, SEQUENCE)?;
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (tag, not_before, rest) = tlv(validity)?;
    let not_before = time(tag, not_before)?;
    let (tag, not_after, _) = tlv(rest)?;
    let not_after = time(tag, not_after)?;
    Some(Validity {
        not_before,
        not_after,
    })
}

/// One DER element: tag, contents, and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// One DER element with tag `want`: its contents and what follows.
fn expect(input: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
    let (tag, contents, rest) = tlv(input)?;
    (tag == want).then_some((contents, rest))
}

/// `UTCTime` (`YYMMDDHHMMSSZ`, years 1950 to 2049) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`), the two forms RFC 5280 allows.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| {
        digits
            .get(range)?
            .iter()
            .try_fold(0i64, |acc, &d| Some(acc * 10 + i64::from(d - b'0')))
    };
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = number(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return None,
    };
    let field = |i: usize| number(rest + 2 * i..rest + 2 * i + 2);
    let (month, day, hour, minute, second) =
        (field(0)?, field(1)?, field(2)?, field(3)?, field(4)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ`, for messages.
pub fn format_utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Seconds since the epoch now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_validity_dates_both_time_forms() {
        assert_eq!(time(UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(UTC_TIME, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(
            time(GENERALIZED_TIME, b"20500101000000Z"),
            Some(2_524_608_000)
        );
        assert_eq!(
            time(GENERALIZED_TIME, b"20240229120000Z"),
            Some(1_709_208_000)
        );
        for bad in [
            &b"700101000000"[..],
            b"7001010000Z",
            b"701301000000Z",
            b"70010100000aZ",
            b"",
        ] {
            assert_eq!(time(UTC_TIME, bad), None, "{bad:?}");
        }
        assert_eq!(time(GENERALIZED_TIME, b"700101000000Z"), None);
        assert_eq!(format_utc(1_709_208_000), "2024-02-29T12:00:00Z");
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(-1), "1969-12-31T23:59:59Z");
        for secs in [0i64, 951_782_400, 4_102_444_800, 1_709_208_000 + 86_399] {
            let days = secs.div_euclid(86_400);
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn tls_validity_of_generated_certificates() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2021, 3, 4);
        params.not_after = rcgen::date_time_ymd(2061, 5, 6);
        let cert = params.self_signed(&key).unwrap();
        let validity = of(cert.der()).unwrap();
        assert_eq!(format_utc(validity.not_before), "2021-03-04T00:00:00Z");
        assert_eq!(format_utc(validity.not_after), "2061-05-06T00:00:00Z");
        // Truncated or altered input gives None, never a panic.
        let der = cert.der().to_vec();
        for len in 0..der.len() {
            let _ = of(&der[..len]);
        }
        for i in 0..der.len().min(64) {
            let mut bent = der.clone();
            bent[i] ^= 0xff;
            let _ = of(&bent);
        }
        assert_eq!(of(b"not a certificate"), None);
    }
}
