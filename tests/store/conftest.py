from tests.emulator_fixtures import azurite_emulator, cloud, gcs_emulator

__all__ = ["azurite_emulator", "cloud", "gcs_emulator"]
