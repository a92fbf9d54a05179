//! A run's metadata: a JSON object its starter gives (which customer pays, a tenant id), stored with the
//! run and handed to every tool call of the run in [`ToolContext::metadata`](crate::ToolContext), on the
//! first segment and on every resume, in any process.
//!
//! The invariant this module keeps: a [`Metadata`] is a JSON object of at most [`Metadata::MAX_BYTES`]
//! bytes as compact JSON, nested at most [`Metadata::MAX_DEPTH`] levels deep. Every way of making one
//! checks it (deserialising too), so a store, a tool or the API never holds anything else.
//!
//! Metadata is not an event payload: it stays out of the event log (whose JSON does not change with it)
//! and is shown on the run. It never changes after the run is created.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::sync::Arc;

/// A run's metadata: a checked JSON object, cheap to clone (every tool call gets it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata(Arc<Map<String, Value>>);

/// Why a value cannot be a run's metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// It is not a JSON object (it is, say, an array or a string). Not retryable.
    #[error("metadata must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// Its compact JSON is longer than [`Metadata::MAX_BYTES`]. Not retryable.
    #[error("metadata must be at most {limit} bytes as JSON, not {bytes}")]
    TooLarge {
        /// Its size as compact JSON.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Objects and arrays in it are nested deeper than [`Metadata::MAX_DEPTH`] (the object itself is
    /// the first level). Not retryable.
    #[error("metadata must be nested at most {limit} levels deep")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
}

/// A metadata value that is not of the type a reader asked for.
#[derive(Debug, thiserror::Error)]
#[error("metadata `{key}` is not of the expected type: {source}")]
pub struct MetadataValueError {
    /// The key read.
    pub key: String,
    /// What serde found.
    pub source: serde_json::Error,
}

impl Metadata {
    /// The most bytes the metadata may take as compact JSON (16 KiB).
    pub const MAX_BYTES: usize = 16 * 1024;

    /// How deep objects and arrays may nest, the metadata object itself being the first level.
    pub const MAX_DEPTH: usize = 16;

    /// No metadata (an empty object).
    pub fn new() -> Self {
        Self::default()
    }

    /// The object as metadata, once it is known to be within the limits.
    ///
    /// # Errors
    /// [`MetadataError::TooDeep`] or [`MetadataError::TooLarge`].
    pub fn from_map(map: Map<String, Value>) -> Result<Self, MetadataError> {
        if map.values().any(|value| deeper_than(value, Self::MAX_DEPTH - 1)) {
            return Err(MetadataError::TooDeep { limit: Self::MAX_DEPTH });
        }
        let bytes = json_len(&map);
        if bytes > Self::MAX_BYTES {
            return Err(MetadataError::TooLarge { bytes, limit: Self::MAX_BYTES });
        }
        Ok(Self(Arc::new(map)))
    }

    /// The JSON value of `key`, if present (as a map's `get`).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// The value of `key` as a `T`: `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// [`MetadataValueError`] when the value is not a `T` (a tool may `?` it into a
    /// [`ToolError`](crate::ToolError)).
    pub fn get_as<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, MetadataValueError> {
        self.0
            .get(key)
            .map(|value| T::deserialize(value).map_err(|source| MetadataValueError { key: key.to_owned(), source }))
            .transpose()
    }

    /// The whole object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The whole object, owned.
    pub fn into_map(self) -> Map<String, Value> {
        Arc::unwrap_or_clone(self.0)
    }

    /// True when there is no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl TryFrom<Map<String, Value>> for Metadata {
    type Error = MetadataError;

    fn try_from(map: Map<String, Value>) -> Result<Self, MetadataError> {
        Self::from_map(map)
    }
}

impl TryFrom<Value> for Metadata {
    type Error = MetadataError;

    fn try_from(value: Value) -> Result<Self, MetadataError> {
        match value {
            Value::Object(map) => Self::from_map(map),
            Value::Array(_) => Err(MetadataError::NotAnObject("an array")),
            Value::String(_) => Err(MetadataError::NotAnObject("a string")),
            Value::Number(_) => Err(MetadataError::NotAnObject("a number")),
            Value::Bool(_) => Err(MetadataError::NotAnObject("a boolean")),
            Value::Null => Err(MetadataError::NotAnObject("null")),
        }
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Metadata::try_from(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// True when `value` nests objects or arrays more than `levels` deep. Stops at the limit, so its own
/// recursion is bounded whatever the value.
fn deeper_than(value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => levels == 0 || items.iter().any(|item| deeper_than(item, levels - 1)),
        Value::Object(map) => levels == 0 || map.values().any(|item| deeper_than(item, levels - 1)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

/// The length of the compact JSON of `map`, without building it.
fn json_len(map: &Map<String, Value>) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Cannot fail: the writer does not, and a map of JSON values always serialises.
    let _ = serde_json::to_writer(&mut count, map);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (1..levels).fold(json!({}), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn an_object_within_the_limits_is_metadata_and_reads_by_type() -> Result<(), Box<dyn std::error::Error>> {
        let metadata = Metadata::try_from(json!({"customer": "acme", "seats": 3, "tags": ["a"]}))?;
        assert_eq!(metadata.get_as::<String>("customer")?, Some("acme".to_owned()));
        assert_eq!(metadata.get_as::<u32>("seats")?, Some(3));
        assert_eq!(metadata.get_as::<Vec<String>>("tags")?, Some(vec!["a".to_owned()]));
        assert_eq!(metadata.get_as::<String>("absent")?, None);
        assert_eq!(metadata.get("seats"), Some(&json!(3)));
        let wrong = metadata.get_as::<u32>("customer").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.starts_with("metadata `customer` is not of the expected type"), "{wrong}");
        assert_eq!(serde_json::to_string(&metadata)?, r#"{"customer":"acme","seats":3,"tags":["a"]}"#);
        assert_eq!(serde_json::from_str::<Metadata>(r#"{"customer":"acme","seats":3,"tags":["a"]}"#)?, metadata);
        assert!(Metadata::new().is_empty() && metadata.len() == 3);
        Ok(())
    }

    #[test]
    fn what_is_not_an_object_is_refused() {
        for (value, what) in [
            (json!([1]), "an array"),
            (json!("x"), "a string"),
            (json!(1), "a number"),
            (json!(true), "a boolean"),
            (Value::Null, "null"),
        ] {
            assert_eq!(Metadata::try_from(value), Err(MetadataError::NotAnObject(what)));
        }
        assert!(serde_json::from_str::<Metadata>("[1]").is_err());
    }

    #[test]
    fn the_size_limit_is_on_the_compact_json() {
        // {"k":"…"} is 8 bytes besides the string's own.
        let at_limit = json!({ "k": "x".repeat(Metadata::MAX_BYTES - 8) });
        assert!(Metadata::try_from(at_limit).is_ok());
        let over = json!({ "k": "x".repeat(Metadata::MAX_BYTES - 7) });
        assert_eq!(
            Metadata::try_from(over),
            Err(MetadataError::TooLarge { bytes: Metadata::MAX_BYTES + 1, limit: Metadata::MAX_BYTES })
        );
        assert!(serde_json::from_value::<Metadata>(json!({ "k": "x".repeat(Metadata::MAX_BYTES) })).is_err());
    }

    #[test]
    fn the_depth_limit_counts_the_object_itself() {
        assert!(Metadata::try_from(nested(Metadata::MAX_DEPTH)).is_ok());
        assert_eq!(
            Metadata::try_from(nested(Metadata::MAX_DEPTH + 1)),
            Err(MetadataError::TooDeep { limit: Metadata::MAX_DEPTH })
        );
        let arrays = (1..Metadata::MAX_DEPTH).fold(json!([]), |inner, _| json!([inner]));
        assert_eq!(
            Metadata::try_from(json!({ "a": arrays })),
            Err(MetadataError::TooDeep { limit: Metadata::MAX_DEPTH })
        );
    }
}
