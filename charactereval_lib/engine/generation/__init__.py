"""Generation (S4): the model under test answers the S3 messages of each test sample."""
