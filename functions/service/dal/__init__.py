"""Data layer: the only place boto3 is used."""
