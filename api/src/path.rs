//! Ingress paths and path types.

/// How a rule path matches, per networking.k8s.io/v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathKind {
    /// The whole path, case-sensitively.
    Exact,
    /// Element-wise on `/`. `ImplementationSpecific` is read as this.
    Prefix,
}

impl PathKind {
    /// Reads `pathType`; `ImplementationSpecific` behaves as `Prefix` (docs/architecture.md).
    pub fn parse(path_type: &str) -> Result<PathKind, PathError> {
        match path_type {
            "Exact" => Ok(PathKind::Exact),
            "Prefix" | "ImplementationSpecific" => Ok(PathKind::Prefix),
            other => Err(PathError::UnknownType(other.to_string())),
        }
    }
}

/// Checks a rule path: absolute, printable, no query or fragment, and no
/// `.`/`..` segments (a backend may resolve them into another route's path).
pub fn validate(path: &str) -> Result<(), PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if let Some(c) = path.chars().find(|c| c.is_control() || *c == ' ') {
        return Err(PathError::BadCharacter(c));
    }
    if path.contains(['?', '#']) {
        return Err(PathError::QueryOrFragment);
    }
    if path.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err(PathError::DotSegment);
    }
    Ok(())
}

/// The key a `Prefix` rule is stored under: trailing slashes removed, so that
/// `/foo/` and `/foo` are one rule and `/` is the empty key.
pub fn prefix_key(path: &str) -> &str {
    path.trim_end_matches('/')
}

/// Why a path was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("pathType {0:?} is not Exact, Prefix or ImplementationSpecific")]
    UnknownType(String),
    #[error("path must start with '/'")]
    NotAbsolute,
    #[error("character {0:?} is not allowed in a path")]
    BadCharacter(char),
    #[error("a path cannot carry a query or fragment")]
    QueryOrFragment,
    #[error("'.' and '..' segments are not allowed in a path")]
    DotSegment,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_types() {
        assert_eq!(PathKind::parse("Exact"), Ok(PathKind::Exact));
        assert_eq!(
            PathKind::parse("ImplementationSpecific"),
            Ok(PathKind::Prefix)
        );
        assert!(PathKind::parse("exact").is_err());
    }

    #[test]
    fn paths() {
        assert!(validate("/").is_ok());
        assert!(validate("/a/b-c_d.e~f%20").is_ok());
        assert!(validate("a").is_err());
        assert!(validate("/a/../b").is_err());
        assert!(validate("/a\n").is_err());
        assert!(validate("/a?b").is_err());
        assert_eq!(prefix_key("/"), "");
        assert_eq!(prefix_key("/foo/"), "/foo");
    }
}
