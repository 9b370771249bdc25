"""What the reference backends share, so each keeps only its vendor's protocol: the provider
base (status calls and creation), credentials and what a broken secret scope means, settings
and their one error, connection errors, the retry budget, redaction, the prompt probe's task
id, sandbox names, the streaming process handle and tar transfer."""
