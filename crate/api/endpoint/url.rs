//! The endpoint's address, as the client uses it and reports print it.

/// The API's base URL from what a user typed: `http://host:8000`, `http://host:8000/v1/`, or a
/// full `.../v1/chat/completions` all give `http://host:8000/v1`; a base with its own path
/// (`https://host/openai/v1`) stays as it is. Credentials, query and fragment are refused, so
/// that a key never travels in a URL that reports print.
pub fn base_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            format!(
                "{}: give the endpoint as http://HOST:PORT or https://HOST/... (the API's base, \
                 such as http://127.0.0.1:8080/v1)",
                crate::error::clip(url)
            )
        })?;
    let scheme = &url[..url.len() - rest.len()];
    if rest.contains(['?', '#']) {
        return Err(
            "the endpoint URL has a query or fragment; give only its base (.../v1)".to_string(),
        );
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() || host.contains('@') || host.contains(char::is_whitespace) {
        return Err(format!(
            "{:?} is not a host (a key belongs in the environment variable --api-key-env \
             names, never in the URL)",
            crate::error::clip(host)
        ));
    }
    let mut path = path.trim_end_matches('/');
    for suffix in ["/chat/completions", "/completions", "/models"] {
        if let Some(p) = path.strip_suffix(suffix) {
            path = p;
            break;
        }
    }
    if path == "chat/completions" || path == "completions" {
        path = "";
    }
    let path = if path.is_empty() { "v1" } else { path };
    Ok(format!("{scheme}{host}/{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_from_what_a_user_types() {
        for (typed, base) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1"),
            ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
            (
                "http://127.0.0.1:8080/v1/chat/completions",
                "http://127.0.0.1:8080/v1",
            ),
            ("https://host/openai/v1", "https://host/openai/v1"),
            (" http://[::1]:9/v1/models ", "http://[::1]:9/v1"),
        ] {
            assert_eq!(base_url(typed).unwrap(), base, "{typed}");
        }
        for bad in [
            "127.0.0.1:8080",
            "ftp://x/v1",
            "http://user:key@host/v1",
            "http://host/v1?key=1",
            "http:///v1",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
    }
}
