#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| teapot_fuzz::dns_query(data));
