//! The endpoint's address, as the client uses it and reports print it.

/// The API's base URL from what a user typed: `http://host:8000`, `http://host:8000/v1/`, or a
/// full `.../v1/chat/completions` all give `http://host:8000/v1`; a base with its own path
/// (`https://host/openai/v1`) stays as it is. Credentials, query and fragment are refused, so
/// that a key never travels in a URL that reports print.
pub fn base_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    // One sentence for every way a URL can be wrong (one message keeps the page's wasm smaller).
    let bad = || {
        format!(
            "{}: give the endpoint as http://HOST:PORT/v1 or https://HOST/... (the API's base, with \
             no credentials, query or fragment: a key goes in the environment variable \
             --api-key-env names, or the page's key field)",
            crate::error::clip(url)
        )
    };
    let (scheme, rest) = ["http://", "https://"]
        .into_iter()
        .find_map(|scheme| Some((scheme, url.strip_prefix(scheme)?)))
        .ok_or_else(bad)?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() || rest.contains(['?', '#', '@']) || rest.contains(char::is_whitespace) {
        return Err(bad());
    }
    // A port, where one is given, is 1 to 65535 (the HTTP client would only say "builder error").
    if let Some((_, port)) = host.rsplit_once(':').filter(|(_, p)| !p.contains(']')) {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if !matches!(port.parse::<u16>(), Ok(1..)) {
            return Err(format!(
                "{}: port {} is out of range: a port is 1 to 65535",
                crate::error::clip(url),
                crate::error::clip(port)
            ));
        }
    }
    let mut path = path.trim_end_matches('/');
    for suffix in ["chat/completions", "completions", "models"] {
        match path.strip_suffix(suffix) {
            Some(p) if p.is_empty() || p.ends_with('/') => {
                path = p.trim_end_matches('/');
                break;
            }
            _ => {}
        }
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
            ("http://h/my/completions2", "http://h/my/completions2"),
            ("http://h/mycompletions", "http://h/mycompletions"),
        ] {
            assert_eq!(base_url(typed).unwrap(), base, "{typed}");
        }
        for bad in [
            "127.0.0.1:8080",
            "ftp://x/v1",
            "http://user:key@host/v1",
            "http://host/v1?key=1",
            "http:///v1",
            "http://host:/v1",
            "http://host:80a/v1",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
        for port in ["0", "65536", "70000", "99999999999"] {
            let typed = format!("http://127.0.0.1:{port}/v1");
            let why = base_url(&typed).unwrap_err();
            assert!(why.contains("a port is 1 to 65535"), "{typed}: {why}");
        }
        assert_eq!(base_url("http://h:65535").unwrap(), "http://h:65535/v1");
    }
}
