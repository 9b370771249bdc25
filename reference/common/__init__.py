"""What the reference backends share: settings, names, the streaming process
handle, tar transfer, redaction and the retry policy."""
