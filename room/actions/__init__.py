"""The only code that changes state. Each action validates, writes one transaction through the
single writer, and publishes to the hub and wakes the runtime only after the commit."""
