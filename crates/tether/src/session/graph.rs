//! What a session can tell about one topic before it creates an endpoint on it: the
//! writers discovered there (so that a tool can choose a reader's QoS to suit them, as
//! `ros2 topic echo` does), and whether its own credential would allow a reader.

use tether_core::EndpointKind;

use super::{DiscoveredEndpoint, OpenError, Session, Topic};

impl Session {
    /// The writers of other sessions discovered so far on `topic`, matched or not: by name
    /// (and type, when both name one), or in a secure realm by the topic id that name and
    /// type give. Partitions are not compared.
    ///
    /// A reader created after this can take the writers' reliability and durability, and so
    /// match all of them: `tether echo` does.
    pub fn discovered_writers(&self, topic: impl Into<Topic>) -> Vec<DiscoveredEndpoint> {
        let topic = topic.into();
        let wire = {
            let g = self.shared.lock();
            g.core
                .config()
                .security
                .as_ref()
                .map(|sec| sec.wire_topic(&topic.name, &topic.type_name))
        };
        self.discovered()
            .into_iter()
            .filter(|d| d.endpoint.kind == EndpointKind::Writer)
            .filter(|d| {
                let i = &d.endpoint.info;
                match &wire {
                    Some(id) => &i.topic == id,
                    None => {
                        i.topic == topic.name
                            && (i.type_name.is_empty()
                                || topic.type_name.is_empty()
                                || i.type_name == topic.type_name)
                    }
                }
            })
            .collect()
    }

    /// Whether this session's credential grants subscribing to `topic` (always, with
    /// security off): the error [`subscriber`](Self::subscriber) would return, without
    /// creating a reader.
    pub fn may_subscribe(&self, topic: impl Into<Topic>) -> Result<(), OpenError> {
        self.granted(&topic.into().name, false)
    }
}
