//! What describes an endpoint on either side: topic, type, partitions and QoS.

use crate::qos::Qos;

/// What makes two endpoints meet: topic, type, partitions, QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Topic name.
    pub topic: String,
    /// Type name (empty: any).
    pub type_name: String,
    /// Partitions (empty: the default partition).
    pub partitions: Vec<String>,
    /// Offered or requested QoS.
    pub qos: Qos,
}

impl EndpointInfo {
    /// True if the two share a partition (no partitions = the default partition "").
    pub(crate) fn shares_partition(&self, other: &EndpointInfo) -> bool {
        let default = [String::new()];
        let a: &[String] = if self.partitions.is_empty() {
            &default
        } else {
            &self.partitions
        };
        let b: &[String] = if other.partitions.is_empty() {
            &default
        } else {
            &other.partitions
        };
        a.iter().any(|x| b.contains(x))
    }
}
