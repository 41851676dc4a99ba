//! The engine behind the decoders: arbitrary datagrams into a participant.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_testkit::fuzz::participant(data));
