//! Serde helpers the protocols' wire types share. A leaf: it knows no protocol.

/// Reads `null` as the type's default: peers write `null` for absent fields.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or_default())
}
