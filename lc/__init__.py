"""The LocalController: worker API, durable state and managers of one edge node."""
