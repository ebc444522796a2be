//! The key of consistent hashing on request variables (`upstream-hash-by`, with
//! `upstream-hash-by-subset` and `-subset-size`): the endpoint a request is
//! tried on first is a function of a key built from the request, so every
//! request with the same key goes to the same endpoint (or, with a subset,
//! to one of the same few endpoints) on every replica.
//!
//! The choice is rendezvous hashing (highest random weight): each endpoint
//! scores `mix(key, address)` and the highest wins. Scores depend only on
//! the key and the endpoint's own address, so removing one of N endpoints
//! moves only the keys it won (about 1/N of them) and adding one takes
//! about 1/(N+1), where a modulo over the list would move most keys. An
//! ejected endpoint scores nothing while it is out, so its keys spread
//! over the others and come back when it does.
//!
//! The key's variables are nginx's, as ingress-nginx documents them:
//! `$request_uri`, `$remote_addr`, `$host`, `$http_NAME`, `$cookie_NAME`,
//! `$arg_NAME`, with literal text between them; at most
//! [`MAX_VARIABLES`] of them (the value itself is at most 256 bytes, the
//! annotation bound), so a request's key costs a bounded walk.

/// The most variables one key may name.
pub const MAX_VARIABLES: usize = 8;

/// The most endpoints a subset may hold (`upstream-hash-by-subset-size`).
pub const MAX_SUBSET: u32 = 64;

/// ingress-nginx's `upstream-hash-by-subset-size` default.
pub const DEFAULT_SUBSET: u32 = 3;

use crate::compile::nginx_variables::{Piece, pieces};

/// A parsed `upstream-hash-by` and its subset size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashBy {
    pub(crate) parts: Vec<Part>,
    /// `upstream-hash-by-subset: "true"`: the key picks this many
    /// endpoints, and each request one of them at random.
    pub subset: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    RequestUri,
    RemoteAddr,
    Host,
    /// Lowercase, `_` read as `-` (nginx's `$http_x_user` is `X-User`).
    Header(String),
    Cookie(String),
    Arg(String),
}
impl HashBy {
    /// Reads `value`; `Err` says why it cannot be served.
    pub fn parse(value: &str, subset: Option<u32>) -> Result<HashBy, String> {
        let mut parts = Vec::new();
        let mut variables = 0;
        for piece in pieces(value, MAX_VARIABLES)? {
            let name = match piece {
                Piece::Text(text) => {
                    parts.push(Part::Literal(text.to_string()));
                    continue;
                }
                Piece::Variable(name) => name,
            };
            variables += 1;
            parts.push(variable(name).ok_or_else(|| {
                format!(
                    "{value:?}: ${name} is not one of $request_uri, $remote_addr, $host, $http_NAME, $cookie_NAME, $arg_NAME"
                )
            })?);
        }
        if variables == 0 {
            return Err(format!(
                "{value:?} names no variable: every request would go to one endpoint"
            ));
        }
        Ok(HashBy { parts, subset })
    }

    /// Whether the key reads a cookie (the pipeline then joins the
    /// request's cookie fields).
    pub fn reads_cookie(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Cookie(_)))
    }
}

fn variable(name: &str) -> Option<Part> {
    let named = |prefix: &str| {
        name.strip_prefix(prefix)
            .filter(|n| !n.is_empty())
            .map(str::to_ascii_lowercase)
    };
    Some(match name {
        "request_uri" => Part::RequestUri,
        "remote_addr" => Part::RemoteAddr,
        "host" => Part::Host,
        _ => {
            if let Some(header) = named("http_") {
                Part::Header(header.replace('_', "-"))
            } else if let Some(cookie) = name.strip_prefix("cookie_").filter(|n| !n.is_empty()) {
                // A cookie's name is case-sensitive.
                Part::Cookie(cookie.to_string())
            } else {
                Part::Arg(named("arg_")?)
            }
        }
    })
}
