//! A control-plane URL's query: `name=value` pairs, percent-decoded (`+` a
//! space, as forms have it), and the metadata filter E2B's SDKs send (one
//! `metadata` parameter holding `key=value&key=value`, itself encoded).

use std::collections::BTreeMap;

use crate::e2b::reply::Failure;

use super::fail;

/// The pairs of `query`, decoded, in order.
pub fn pairs(query: Option<&str>) -> Result<Vec<(String, String)>, Failure> {
    let Some(query) = query else {
        return Ok(Vec::new());
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(name, "query")?, decode(value, "query")?))
        })
        .collect()
}

/// The one value of `name` in `pairs`; `Err` for several.
pub fn one<'a>(pairs: &'a [(String, String)], name: &str) -> Result<Option<&'a str>, Failure> {
    let mut values = pairs
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str());
    match (values.next(), values.next()) {
        (first, None) => Ok(first),
        _ => Err(fail::invalid(name, "send it once")),
    }
}

/// Every value of `name`, each split at commas (`state=running,paused`).
pub fn list(pairs: &[(String, String)], name: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(n, _)| n == name)
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The number in `name`, if given.
pub fn number(pairs: &[(String, String)], name: &str) -> Result<Option<u64>, Failure> {
    one(pairs, name)?
        .map(|text| {
            text.parse::<u64>()
                .map_err(|_| fail::invalid(name, format!("{text:?} is not a whole number")))
        })
        .transpose()
}

/// The metadata filter: the `metadata` parameter's value read as
/// `key=value&...`, each side decoded once more (the SDKs encode twice).
pub fn metadata(pairs: &[(String, String)]) -> Result<BTreeMap<String, String>, Failure> {
    let mut filter = BTreeMap::new();
    for text in pairs
        .iter()
        .filter(|(n, _)| n == "metadata")
        .map(|(_, v)| v)
    {
        for pair in text.split('&').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(fail::invalid(
                    "metadata",
                    format!("{pair:?} is not key=value"),
                ));
            };
            let key = decode(&decode(key, "metadata")?, "metadata")?;
            let value = decode(&decode(value, "metadata")?, "metadata")?;
            filter.insert(key, value);
        }
    }
    Ok(filter)
}

/// `text` percent-decoded, `+` as a space; `Err` names `field` for a bad
/// escape or bytes that are not UTF-8.
pub fn decode(text: &str, field: &str) -> Result<String, Failure> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| fail::invalid(field, format!("a bad %-escape in {text:?}")))?;
                out.push(hex);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| fail::invalid(field, "not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_metadata_filter_is_decoded() {
        // Python: urlencode({quote(k): quote(v)}) as the value of `metadata`.
        let pairs = pairs(Some("metadata=team%3Dred%26job%3Da%2520b&limit=5")).expect("pairs");
        let filter = metadata(&pairs).expect("filter");
        assert_eq!(filter.get("team").map(String::as_str), Some("red"));
        assert_eq!(filter.get("job").map(String::as_str), Some("a b"));
        assert_eq!(number(&pairs, "limit").expect("limit"), Some(5));
    }

    #[test]
    fn states_split_and_bad_input_is_named() {
        let pairs = pairs(Some("state=running,paused&limit=x")).expect("pairs");
        assert_eq!(list(&pairs, "state"), vec!["running", "paused"]);
        assert!(number(&pairs, "limit")
            .unwrap_err()
            .message
            .starts_with("limit"));
        assert!(decode("%zz", "q").is_err());
    }
}
