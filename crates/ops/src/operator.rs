//! Who runs `oncehookctl`: the operator's login (`$USER`), named in the
//! audit of what they change and in the warning of what they reveal.

/// The operator's login; `None` when `$USER` is unset or blank.
pub fn login() -> Option<String> {
    std::env::var("USER")
        .ok()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
}

/// The operator as the audit names them: `login@oncehookctl`.
pub fn audit_name() -> String {
    format!(
        "{}@oncehookctl",
        login().unwrap_or_else(|| "unknown".to_owned())
    )
}
