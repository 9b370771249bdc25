"""Reference Hermes terminal backends: Upstash Box, Cloudflare, DeepInfra."""
