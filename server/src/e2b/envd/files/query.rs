//! The query of a `/files` request: `path` and `username`.

use tonic::Status;

use airlock_api::reason::invalid;

/// At most this many bytes of query.
const MAX_QUERY_BYTES: usize = 16 * 1024;

/// What a `/files` request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// The file (download, octet-stream upload; the one file of a
    /// multipart upload when given).
    pub path: Option<String>,
    /// Who acts (E2B's default user when absent).
    pub username: Option<String>,
}

impl Query {
    /// The query of `uri`; `Err` names what is malformed.
    pub fn parse(uri: &http::Uri) -> Result<Self, Status> {
        let raw = uri.query().unwrap_or_default();
        if raw.len() > MAX_QUERY_BYTES {
            return Err(invalid(
                "query",
                format!("longer than {MAX_QUERY_BYTES} bytes"),
            ));
        }
        let mut query = Query::default();
        for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
            let slot = match name.as_ref() {
                "path" => &mut query.path,
                "username" => &mut query.username,
                _ => continue,
            };
            if slot.is_some() {
                return Err(invalid(&name, "given twice"));
            }
            *slot = (!value.is_empty()).then(|| value.into_owned());
        }
        Ok(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_user_are_decoded() {
        let uri: http::Uri = "/files?path=%2Fhome%2Fuser%2Fa%20b.txt&username=root&x=1"
            .parse()
            .unwrap();
        let query = Query::parse(&uri).unwrap();
        assert_eq!(query.path.as_deref(), Some("/home/user/a b.txt"));
        assert_eq!(query.username.as_deref(), Some("root"));
        let twice: http::Uri = "/files?path=a&path=b".parse().unwrap();
        assert!(Query::parse(&twice).is_err());
        assert_eq!(
            Query::parse(&"/files".parse().unwrap()).unwrap(),
            Query::default()
        );
    }
}
