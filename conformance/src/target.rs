//! Where a scenario request goes: scheme, Host header, SNI, request target,
//! and how a redirect's `Location` turns into the next request.
//!
//! The upstream client (`test/http/http.go`) always connects to the load
//! balancer's address and only *names* the host: the Host header is the URL's
//! host (port included when the URL has one), the SNI is the host for https,
//! and the request target is `/` followed by the URL path without its leading
//! slashes. Redirects (301/302/303/307/308) are followed with the same method,
//! to the load balancer address matching the `Location`'s scheme, naming the
//! `Location`'s host (without port, as Go's `URL.Hostname()`) and path.
//!
//! One deliberate difference: upstream drops the URL's query string (it only
//! forwards `URL.Path`); this runner keeps it.

/// Plain HTTP or TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http://`
    Http,
    /// `https://`
    Https,
}

impl Scheme {
    fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Ok(Scheme::Http),
            "https" => Ok(Scheme::Https),
            other => Err(format!("unsupported URL scheme {other:?} (http or https)")),
        }
    }

    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// One request's destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Which proxy listener to use.
    pub scheme: Scheme,
    /// The URL's host (with port if the URL has one); `None` when the URL
    /// names no host: then the Host header is the proxy's own address, as for
    /// the upstream client.
    pub host: Option<String>,
    /// The request target: `/`, path, optional `?query`.
    pub path: String,
}

impl Target {
    /// Builds the target of the `I send a "M" request to http://"H"/"P"` form.
    pub fn from_parts(scheme: Scheme, host: &str, path: &str) -> Self {
        Target {
            scheme,
            host: (!host.is_empty()).then(|| host.to_string()),
            path: format!("/{}", path.trim_start_matches('/')),
        }
    }

    /// Parses an absolute `http(s)://host[:port][/path][?query][#fragment]` URL.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?} is not an absolute http(s) URL"))?;
        let scheme = Scheme::parse(scheme)?;
        let (authority, path) = split_authority(rest);
        let host = strip_userinfo(authority);
        Ok(Target {
            scheme,
            host: (!host.is_empty()).then(|| host.to_string()),
            path: normalise_path(path),
        })
    }

    /// The Host header: the URL's host, or `fallback` (the proxy's address)
    /// when the URL named none.
    pub fn host_header<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.host.as_deref().unwrap_or(fallback)
    }

    /// The TLS server name: the host without port or IPv6 brackets; `None`
    /// without a host or when the host is an IP literal (SNI cannot carry one).
    pub fn sni(&self) -> Option<&str> {
        let host = hostname(self.host.as_deref()?);
        if host.is_empty() || host.parse::<std::net::IpAddr>().is_ok() {
            None
        } else {
            Some(host)
        }
    }

    /// The next request after a redirect answered with `location`.
    pub fn redirect(&self, location: &str) -> Result<Target, String> {
        let location = location.trim();
        if location.is_empty() {
            return Err("redirect without a Location header".into());
        }
        if let Some((scheme, rest)) = location.split_once("://")
            && !scheme.contains('/')
            && !scheme.contains('?')
        {
            let scheme =
                Scheme::parse(scheme).map_err(|e| format!("redirect to {location:?}: {e}"))?;
            let (authority, path) = split_authority(rest);
            let host = hostname(strip_userinfo(authority));
            return Ok(Target {
                scheme,
                host: (!host.is_empty())
                    .then(|| host.to_string())
                    .or_else(|| self.host.clone()),
                path: normalise_path(path),
            });
        }
        if let Some(rest) = location.strip_prefix("//") {
            let (authority, path) = split_authority(rest);
            let host = hostname(strip_userinfo(authority));
            return Ok(Target {
                scheme: self.scheme,
                host: (!host.is_empty())
                    .then(|| host.to_string())
                    .or_else(|| self.host.clone()),
                path: normalise_path(path),
            });
        }
        let path = if location.starts_with('/') {
            normalise_path(location)
        } else {
            // Relative reference: resolve against the current path's directory.
            let current = self.path.split(['?', '#']).next().unwrap_or("/");
            let dir = &current[..current.rfind('/').map_or(0, |i| i + 1)];
            normalise_path(&format!("{dir}{location}"))
        };
        Ok(Target {
            scheme: self.scheme,
            host: self.host.clone(),
            path,
        })
    }

    /// A readable `scheme://host/path`, for messages.
    pub fn display(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.host.as_deref().unwrap_or("<proxy address>"),
            self.path
        )
    }
}

/// 301, 302, 303, 307 and 308 are followed.
pub fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// The host part of `host[:port]` / `[v6][:port]`, brackets removed.
pub fn hostname(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn split_authority(rest: &str) -> (&str, &str) {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    (&rest[..end], &rest[end..])
}

fn strip_userinfo(authority: &str) -> &str {
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// `/` + path without leading slashes, query kept, fragment dropped.
fn normalise_path(path: &str) -> String {
    let path = path.split('#').next().unwrap_or("");
    let (p, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let mut out = format!("/{}", p.trim_start_matches('/'));
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(scheme: Scheme, host: Option<&str>, path: &str) -> Target {
        Target {
            scheme,
            host: host.map(str::to_string),
            path: path.to_string(),
        }
    }

    #[test]
    fn parse_urls() {
        use Scheme::*;
        let cases = [
            (
                "http://api.example.org",
                t(Http, Some("api.example.org"), "/"),
            ),
            (
                "https://api.example.org/",
                t(Https, Some("api.example.org"), "/"),
            ),
            (
                "HTTPS://Shop.Example:8443/a/b",
                t(Https, Some("Shop.Example:8443"), "/a/b"),
            ),
            (
                "http://x.example/a?b=c&d#frag",
                t(Http, Some("x.example"), "/a?b=c&d"),
            ),
            ("http://x.example?q=1", t(Http, Some("x.example"), "/?q=1")),
            (
                "http://user:pw@x.example//double",
                t(Http, Some("x.example"), "/double"),
            ),
            ("http://[::1]:81/v6", t(Http, Some("[::1]:81"), "/v6")),
            ("http:///no-host", t(Http, None, "/no-host")),
        ];
        for (url, want) in cases {
            assert_eq!(Target::parse(url).unwrap(), want, "{url}");
        }
        assert!(Target::parse("ftp://x.example/").is_err());
        assert!(Target::parse("x.example/path").is_err());
    }

    #[test]
    fn parts_form() {
        assert_eq!(
            Target::from_parts(Scheme::Http, "cart.example", "v1/items"),
            t(Scheme::Http, Some("cart.example"), "/v1/items")
        );
        assert_eq!(
            Target::from_parts(Scheme::Http, "", ""),
            t(Scheme::Http, None, "/")
        );
        assert_eq!(
            Target::from_parts(Scheme::Http, "a", "/already"),
            t(Scheme::Http, Some("a"), "/already")
        );
    }

    #[test]
    fn host_header_and_sni() {
        let target = Target::parse("https://Shop.Example:8443/x").unwrap();
        assert_eq!(target.host_header("127.0.0.1:1"), "Shop.Example:8443");
        assert_eq!(target.sni(), Some("Shop.Example"));
        let bare = Target::from_parts(Scheme::Https, "", "x");
        assert_eq!(bare.host_header("127.0.0.1:9"), "127.0.0.1:9");
        assert_eq!(bare.sni(), None);
        assert_eq!(Target::parse("https://10.1.2.3/").unwrap().sni(), None);
        assert_eq!(Target::parse("https://[::1]:4/").unwrap().sni(), None);
        assert_eq!(hostname("a.example:80"), "a.example");
        assert_eq!(hostname("[fe80::1]:80"), "fe80::1");
        assert_eq!(hostname("a.example"), "a.example");
    }

    #[test]
    fn redirects() {
        use Scheme::*;
        let from = Target::parse("http://shop.example:8080/cart/items?x=1").unwrap();
        let cases = [
            // http -> https upgrade: port dropped, as Go's URL.Hostname().
            (
                "https://shop.example:8443/cart/items",
                t(Https, Some("shop.example"), "/cart/items"),
            ),
            (
                "https://other.example",
                t(Https, Some("other.example"), "/"),
            ),
            (
                "//cdn.example/img?y=2",
                t(Http, Some("cdn.example"), "/img?y=2"),
            ),
            ("/login", t(Http, Some("shop.example:8080"), "/login")),
            ("next", t(Http, Some("shop.example:8080"), "/cart/next")),
            ("/a?b#c", t(Http, Some("shop.example:8080"), "/a?b")),
        ];
        for (location, want) in cases {
            assert_eq!(from.redirect(location).unwrap(), want, "{location}");
        }
        assert!(from.redirect("").is_err());
        assert!(from.redirect("gopher://x/").is_err());
        for code in [301, 302, 303, 307, 308] {
            assert!(is_redirect(code));
        }
        for code in [200, 300, 304, 305, 404] {
            assert!(!is_redirect(code));
        }
    }
}
