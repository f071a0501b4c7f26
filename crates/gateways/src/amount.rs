//! Decimal money strings ("500.00", "12.5", "7") to integer minor units,
//! without ever going through a float.

/// Why an amount string could not be read as money.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Not of the form `digits[.digits]` (signs, exponents, spaces, grouping).
    #[error("amount {0:?} is not a decimal number")]
    NotDecimal(String),
    /// Non-zero digits beyond the currency's decimal places.
    #[error("amount {0:?} has more than {1} decimal places")]
    TooPrecise(String, u32),
    /// Does not fit `i64` minor units.
    #[error("amount {0:?} is out of range")]
    OutOfRange(String),
    /// A valid decimal with a leading `-`.
    #[error("amount {0:?} is negative")]
    Negative(String),
}

/// Parses a non-negative decimal string into minor units with `exponent`
/// decimal places (2 for INR/USD). Trailing zeros beyond the exponent are
/// accepted ("500.000"), significant extra digits are an error.
///
/// The accepted grammar is `digits [ "." digits ]`: no sign, exponent,
/// whitespace or digit grouping. A leading `-` in front of an otherwise valid
/// number is reported as [`AmountError::Negative`].
pub fn parse_decimal_minor(s: &str, exponent: u32) -> Result<i64, AmountError> {
    if let Some(rest) = s.strip_prefix('-') {
        return match split_decimal(rest) {
            Some(_) => Err(AmountError::Negative(s.to_owned())),
            None => Err(AmountError::NotDecimal(s.to_owned())),
        };
    }
    let (int_part, frac_part) =
        split_decimal(s).ok_or_else(|| AmountError::NotDecimal(s.to_owned()))?;
    let out_of_range = || AmountError::OutOfRange(s.to_owned());

    let scale = 10i64.checked_pow(exponent).ok_or_else(out_of_range)?;
    let mut major: i64 = 0;
    for d in int_part.bytes() {
        major = major
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(d - b'0')))
            .ok_or_else(out_of_range)?;
    }

    let mut minor: i64 = 0;
    for (i, d) in frac_part.bytes().enumerate() {
        let digit = i64::from(d - b'0');
        if u32::try_from(i).map_or(true, |i| i >= exponent) {
            if digit != 0 {
                return Err(AmountError::TooPrecise(s.to_owned(), exponent));
            }
        } else {
            minor = minor * 10 + digit;
        }
    }
    // Pad the fraction to `exponent` digits ("12.5" -> 50 with exponent 2).
    let given = u32::try_from(frac_part.len()).unwrap_or(u32::MAX);
    for _ in given..exponent {
        minor *= 10;
    }

    major
        .checked_mul(scale)
        .and_then(|m| m.checked_add(minor))
        .ok_or_else(out_of_range)
}

/// Splits `digits [ "." digits ]` into its integer and fraction digits, or
/// `None` if `s` is anything else.
fn split_decimal(s: &str) -> Option<(&str, &str)> {
    let (int_part, frac_part) = match s.split_once('.') {
        Some((i, f)) => {
            if f.is_empty() {
                return None;
            }
            (i, f)
        }
        None => (s, ""),
    };
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    (!int_part.is_empty() && all_digits(int_part) && all_digits(frac_part))
        .then_some((int_part, frac_part))
}

/// Formats integer minor units as a decimal string with `exponent` decimal
/// places (`50000`, 2 → `"500.00"`; `7`, 0 → `"7"`). The inverse of
/// [`parse_decimal_minor`] for non-negative amounts and exponents up to 18
/// (the largest that fits `i64`).
pub fn format_decimal_minor(minor: i64, exponent: u32) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let digits = minor.unsigned_abs().to_string();
    let exp = usize::try_from(exponent).unwrap_or(usize::MAX);
    if exp == 0 {
        return format!("{sign}{digits}");
    }
    let padded = if digits.len() <= exp {
        format!("{}{digits}", "0".repeat(exp - digits.len() + 1))
    } else {
        digits
    };
    let (int_part, frac_part) = padded.split_at(padded.len() - exp);
    format!("{sign}{int_part}.{frac_part}")
}

/// Number of decimal places of an ISO 4217 currency's minor unit: 0 for
/// currencies such as JPY or KRW, 3 for BHD, KWD and the like, 2 otherwise
/// (INR, USD, EUR, …). Case-insensitive.
pub fn currency_exponent(currency: &str) -> u32 {
    const ZERO: &[&str] = &[
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND",
        "VUV", "XAF", "XOF", "XPF",
    ];
    const THREE: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];
    let upper = currency.to_ascii_uppercase();
    if ZERO.contains(&upper.as_str()) {
        0
    } else if THREE.contains(&upper.as_str()) {
        3
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_decimals() {
        assert_eq!(parse_decimal_minor("500.00", 2), Ok(50000));
        assert_eq!(parse_decimal_minor("500", 2), Ok(50000));
        assert_eq!(parse_decimal_minor("12.5", 2), Ok(1250));
        assert_eq!(parse_decimal_minor("500.000", 2), Ok(50000));
        assert_eq!(parse_decimal_minor("0.01", 2), Ok(1));
        assert_eq!(parse_decimal_minor("007.50", 2), Ok(750));
        assert_eq!(parse_decimal_minor("7", 0), Ok(7));
        assert_eq!(parse_decimal_minor("7.000", 0), Ok(7));
        assert_eq!(parse_decimal_minor("1.234", 3), Ok(1234));
    }

    #[test]
    fn rejects_what_is_not_money() {
        for s in [
            "1e3", "", ".", "abc", " 5", "5 ", "+5", "5.", ".5", "1,000", "1.2.3", "0x10",
        ] {
            assert_eq!(
                parse_decimal_minor(s, 2),
                Err(AmountError::NotDecimal(s.to_owned())),
                "{s:?}"
            );
        }
        assert_eq!(
            parse_decimal_minor("0.001", 2),
            Err(AmountError::TooPrecise("0.001".into(), 2))
        );
        assert_eq!(
            parse_decimal_minor("-1", 2),
            Err(AmountError::Negative("-1".into()))
        );
        assert_eq!(
            parse_decimal_minor("-x", 2),
            Err(AmountError::NotDecimal("-x".into()))
        );
    }

    #[test]
    fn overflow_is_out_of_range() {
        let max = i64::MAX.to_string();
        assert_eq!(parse_decimal_minor(&max, 0), Ok(i64::MAX));
        assert!(matches!(
            parse_decimal_minor(&max, 2),
            Err(AmountError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_decimal_minor("99999999999999999999", 0),
            Err(AmountError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_decimal_minor("1", 40),
            Err(AmountError::OutOfRange(_))
        ));
        assert_eq!(parse_decimal_minor("92233720368547758.07", 2), Ok(i64::MAX));
    }

    #[test]
    fn formats_minor_units() {
        assert_eq!(format_decimal_minor(50000, 2), "500.00");
        assert_eq!(format_decimal_minor(5, 2), "0.05");
        assert_eq!(format_decimal_minor(0, 2), "0.00");
        assert_eq!(format_decimal_minor(7, 0), "7");
        assert_eq!(format_decimal_minor(1234, 3), "1.234");
        assert_eq!(format_decimal_minor(-150, 2), "-1.50");
        assert_eq!(format_decimal_minor(i64::MAX, 2), "92233720368547758.07");
    }

    #[test]
    fn currency_exponents() {
        assert_eq!(currency_exponent("INR"), 2);
        assert_eq!(currency_exponent("jpy"), 0);
        assert_eq!(currency_exponent("KWD"), 3);
    }
}
